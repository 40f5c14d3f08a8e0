"""Statistics over questions shared by compare, calibrate and racing: bootstrap CIs, paired
permutation tests, Holm's correction (`inference`), prediction-powered means (`ppi`)."""
