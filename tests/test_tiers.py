"""The fast tier holds no timing: no test outside the process, slow and engines tiers sleeps, sets
a wall-clock deadline under 60 s, or races a thread against the process's output. Such a test
passes alone and fails on a loaded machine (issue 51: `--help` had to finish within a 0.3 s
thread sleep, and failed at load 10-28). An AST scan of tests/ finds them: in a fast test, in
the module's and conftest's functions and fixtures it reaches, and in the code it hands a
subprocess as a string. A test whose subject is timing belongs in the process tier; each entry of
ALLOWED says why its timing cannot make a test fail."""
import ast
import re
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).parent
OTHER_TIERS = {"process", "slow", "engines"}
MINUTE = 60  # a deadline this long or longer is a hang guard, not a race
CLOCKS = {"monotonic", "time", "perf_counter", "monotonic_ns", "time_ns", "perf_counter_ns"}
WAITS = {"join", "wait", "result", "acquire", "wait_for"}  # a number among their arguments is a deadline
SERVER_SLEEPS = {"latency", "timeout_sleep", "dribble_s"}  # the test server's own sleeps (tests/openai_server.py)
SLEEPING_FAULTS = {"timeout", "dribble"}  # faults of the test server that sleep before (or while) replying
CODE_SLEEP = re.compile(r"\bsleep\(")
CODE_THREAD_PRINTS = re.compile(r"Thread\(.*\b(print|write)\(", re.DOTALL)

# (file, function where the finding is): why it cannot make a fast test fail
ALLOWED = {
    ("test_cli.py", "test_the_command_ends_without_teardown_but_with_its_exit_handlers_status_and_output"):
        "its thread writes only once the main thread has ended (it joins it): the order it checks is the "
        "command's, not a race",
    ("conftest.py", "mlflow_server"): "starts a real `mlflow server` and polls it until it answers (120 s bound); "
                                      "only the `server` parameter of mlflow_store, marked process, reaches it",
}


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    function: str  # where the timing is (the test, or a function it reaches)
    what: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}: {self.what}"


def marks(decorators: list[ast.expr]) -> set[str]:
    """The pytest marks among `decorators` (`@pytest.mark.NAME` or `@pytest.mark.NAME(...)`)."""
    found = set()
    for decorator in decorators:
        node = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "pytest.mark":
            found.add(node.attr)
    return found


def module_marks(tree: ast.Module) -> set[str]:
    """The marks of `pytestmark = ...` (one mark or a list)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            return marks(list(values))
    return set()


def number(node: ast.expr) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    return None


def name_of(node: ast.expr) -> str:
    """`f` of `f(...)`, `sleep` of `time.sleep(...)`."""
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def is_clock(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CLOCKS \
        and ast.unparse(node.func.value) == "time"


def timing_in(function: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every piece of timing in `function`, nested functions and lambdas included."""
    found = []
    clocked = {target.id for node in ast.walk(function) if isinstance(node, ast.Assign)
               and any(is_clock(n) for n in ast.walk(node.value)) for target in node.targets if isinstance(target, ast.Name)}
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            called = name_of(node.func)
            if called == "sleep":
                found.append((node.lineno, f"{ast.unparse(node)[:60]}"))
            for keyword in node.keywords:
                value = number(keyword.value)
                if keyword.arg and ("timeout" in keyword.arg or "deadline" in keyword.arg) and value is not None \
                        and value < MINUTE:
                    found.append((node.lineno, f"a deadline under {MINUTE} s: {keyword.arg}={value:g}"))
                if keyword.arg in SERVER_SLEEPS and value:
                    found.append((node.lineno, f"the test server sleeps: {keyword.arg}={value:g}"))
            if called in WAITS and isinstance(node.func, ast.Attribute):
                for arg in node.args:
                    if (value := number(arg)) is not None and value < MINUTE:
                        found.append((node.lineno, f"a deadline under {MINUTE} s: {ast.unparse(node)[:60]}"))
            if called == "Thread" and any(k.arg == "target" and prints(k.value) for k in node.keywords):
                found.append((node.lineno, "a thread that writes the process's output, racing it"))
        elif isinstance(node, ast.Assign):
            for target, value in assigned(node):
                if isinstance(target, ast.Attribute) and target.attr in SERVER_SLEEPS and number(value):
                    found.append((node.lineno, f"the test server sleeps: {ast.unparse(target)} = {ast.unparse(value)}"))
                if isinstance(target, ast.Attribute) and target.attr == "faults":
                    sleeping = {c.value for c in ast.walk(value) if isinstance(c, ast.Constant)} & SLEEPING_FAULTS
                    if sleeping:
                        found.append((node.lineno, f"the test server sleeps: faults {', '.join(sorted(sleeping))}"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # deadline = time.monotonic() + 5
            value = number(node.right) if is_clock(node.left) else number(node.left) if is_clock(node.right) else None
            if value is not None and value < MINUTE:
                found.append((node.lineno, f"a deadline under {MINUTE} s: {ast.unparse(node)[:60]}"))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            limits = [v for s in sides if (v := number(s)) is not None and v < MINUTE]
            timed = any(is_clock(n) or (isinstance(n, ast.Name) and n.id in clocked) for s in sides for n in ast.walk(s))
            if limits and timed:
                found.append((node.lineno, f"a wall-clock bound under {MINUTE} s: {ast.unparse(node)[:60]}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if CODE_SLEEP.search(node.value):
                found.append((node.lineno, "code run elsewhere sleeps: " + " ".join(node.value.split())[:60]))
            elif CODE_THREAD_PRINTS.search(node.value):
                found.append((node.lineno, "code run elsewhere has a thread write the output"))
    return found


def assigned(node: ast.Assign) -> list[tuple[ast.expr, ast.expr]]:
    """(target, value) pairs of `a = x` and `a, b = x, y`."""
    pairs = []
    for target in node.targets:
        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) and len(target.elts) == len(node.value.elts):
            pairs += zip(target.elts, node.value.elts)
        else:
            pairs.append((target, node.value))
    return pairs


def prints(target: ast.expr) -> bool:
    return any(isinstance(n, ast.Call) and name_of(n.func) in ("print", "write") for n in ast.walk(target))


class Module:
    def __init__(self, path: Path):
        self.path, self.tree = path, ast.parse(path.read_text(), str(path))
        self.functions = {node.name: node for node in self.tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}

    def tests(self):
        """(test function, its marks) of every test of the module, in classes too."""
        base = module_marks(self.tree)
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                yield node, base | marks(node.decorator_list)
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                for method in node.body:
                    if isinstance(method, ast.FunctionDef) and method.name.startswith("test"):
                        yield method, base | marks(node.decorator_list) | marks(method.decorator_list)


def reached(test: ast.FunctionDef, modules: list[Module]) -> list[tuple[Module, ast.AST]]:
    """The test and every function or class of its module and conftest it names or takes as a
    fixture, and theirs, once each."""
    seen: dict[tuple[str, str], tuple[Module, ast.AST]] = {}
    todo: list[ast.AST] = [test]
    names = {a.arg for a in test.args.args}
    while todo:
        node = todo.pop()
        names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        if isinstance(node, ast.FunctionDef):
            names |= {a.arg for a in node.args.args}
        for module in modules:
            for name in names:
                if name in module.functions and (module.path.name, name) not in seen:
                    seen[module.path.name, name] = (module, module.functions[name])
                    todo.append(module.functions[name])
    return list(seen.values())


def fast_tier_timing() -> list[Finding]:
    conftest = Module(TESTS / "conftest.py")
    findings: set[Finding] = set()
    for path in sorted(TESTS.glob("test_*.py")):
        if path == Path(__file__):  # its strings are the scan's own examples
            continue
        module = Module(path)
        for test, test_marks in module.tests():
            if test_marks & OTHER_TIERS:
                continue
            places = [(module, test), *((m, f) for m, f in reached(test, [module, conftest]) if f is not test)]
            for where, function in places:
                name = getattr(function, "name", "?")
                if (where.path.name, name) in ALLOWED:
                    continue
                findings |= {Finding(where.path.name, line, name, what) for line, what in timing_in(function)}
    return sorted(findings, key=lambda f: (f.file, f.line, f.what))


def test_no_fast_test_sleeps_races_or_sets_a_deadline_under_a_minute():
    findings = fast_tier_timing()
    assert not findings, ("timing in the fast tier (it holds at load 30 only without): make it wait on an event, "
                          "or mark the test process when timing is its subject:\n" + "\n".join(map(str, findings)))


def test_the_scan_finds_each_kind_of_timing(tmp_path):
    """The scan is not blind: each kind of timing, in a test and in what it reaches, is found; the
    same in a process-tier test is not."""
    (tmp_path / "conftest.py").write_text("def helper():\n    import time\n    time.sleep(1)\n")
    (tmp_path / "test_timed.py").write_text(
        "import subprocess, threading, time\nimport pytest\n"
        "def test_sleeps():\n    time.sleep(0.3)\n"
        "def test_helper():\n    helper()\n"
        "def test_deadline(server):\n    subprocess.run(['x'], timeout=5)\n    server.faults, server.latency = [], 0.2\n"
        "def test_bound():\n    start = time.monotonic()\n    assert time.monotonic() - start < 2\n"
        "def test_wait(event):\n    event.wait(0.5)\n"
        "def test_until():\n    deadline = time.monotonic() + 5\n"
        "def test_thread():\n    threading.Thread(target=lambda: print('x')).start()\n"
        "def test_code():\n    subprocess.run(['python', '-c', 'import time; time.sleep(0.3)'], timeout=120)\n"
        "@pytest.mark.process\ndef test_timing_is_its_subject():\n    time.sleep(1)\n"
        "def test_a_minute_is_a_hang_guard():\n    subprocess.run(['x'], timeout=60)\n")
    global TESTS
    kept, TESTS = TESTS, tmp_path
    try:
        found = fast_tier_timing()
    finally:
        TESTS = kept
    assert {f.function for f in found} == {"test_sleeps", "helper", "test_deadline", "test_bound", "test_wait",
                                           "test_until", "test_thread", "test_code"}
    assert sum(f.function == "test_deadline" for f in found) == 2


def test_reads_of_the_shared_data_are_seen_in_the_process_and_on_a_childs_command_line(tmp_path):
    from conftest import SharedDataReads

    shared = tmp_path / "shared" / "data"
    reads = SharedDataReads(shared)
    reads("open", (str(shared / "hotpotqa" / "dev.jsonl"), "r", 0))
    reads("os.listdir", (shared,))
    reads("open", (str(tmp_path / "shared" / "database.db"), "r", 0))  # beside it, not in it
    reads("open", (3, "r", 0))  # a file descriptor names no path
    reads("subprocess.Popen", ("python", ["python", "-m", "ragexp", "dataset=hotpotqa"], None, None))
    reads("subprocess.Popen", ("python", ["python", "-m", "ragexp", f"dataset.path={shared}/x"], None, None))
    reads("subprocess.Popen", ("python", ["python", "-m", "ragexp", "dataset=sample"], None, None))
    assert [seen.split(" ")[0] for seen in reads.seen] == ["open", "os.listdir", "a", "a"]
