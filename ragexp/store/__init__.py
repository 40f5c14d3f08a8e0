"""What runs keep: the stage cache, run folders, MLflow tracking and its stores, traces."""
