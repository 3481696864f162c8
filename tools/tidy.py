# Source rules that are tests: line/function/file length and banned constructs (run by test_source).
"""pybroker's source rules, each with its replacement in the message.

Usage: ``python tools/tidy.py [ROOT]`` prints violations and exits 1 if there are any.
"""
import ast
import pathlib
import re
import sys

LINE_COLUMNS_MAX = 100
FUNCTION_LINES_MAX = 70
FILE_LINES_MAX = 900
SOURCE_SUFFIXES = (".py", ".pyx", ".pxd", ".pyi")
SCANNED_DIRS = ("pybroker", "tools", "tests", "benchmarks")

# (regex, where it is banned, replacement advice)
BANS = [
    (re.compile(r"^\s*except\s*:"), "everywhere",
     "bare `except:` -> catch the exceptions you expect"),
    (re.compile(r"\bprint\("), "library",
     "print( in library code -> logging (only pybroker/cli.py writes to stdout)"),
    (re.compile(r"\bos\.environ\b"), "not-config",  # tidy: allow
     "os.environ outside config.py/setup.py -> add a setting to pybroker/config.py"),  # tidy: allow
    (re.compile(r"\bos\.fsync\b|\bos\.fdatasync\b"), "not-store",
     "fsync outside pybroker/store -> flush through the store's mapped files"),
    (re.compile(r"\btime\.sleep\("), "proc",
     "time.sleep in a pybroker/proc data-plane loop -> wait on an eventfd/futex wake-up"),
    (re.compile(r"\bcreate_task\(|\bensure_future\("), "library",
     "an asyncio task nobody awaits -> pybroker.tasks.start_task (an end by an error is logged "
     "and handled); where the creator awaits it, say so: `# tidy: allow (awaited)`"),
    (re.compile(r"\basyncio\.(wait_for|timeout)\("), "library",
     "asyncio.wait_for / asyncio.timeout -> pybroker.tasks.within: on Python 3.11 wait_for "
     "loses a cancellation that meets its awaitable's end, asyncio.timeout refuses to run "
     "outside a task (an eager handler's first step)"),
    (re.compile(r"^\s*DEF\s+\w+"), "pyx",
     "DEF in Cython -> cdef enum or cdef extern from * constants"),
    (re.compile(r"\bFIXME\b"), "everywhere",  # tidy: allow
     "leftover FIXME -> fix it or file an issue"),  # tidy: allow
]


def _applies(where: str, rel: str) -> bool:
    in_library = rel.startswith("pybroker/")
    if where == "everywhere":
        return True
    if where == "library":
        return in_library and rel != "pybroker/cli.py"
    if where == "not-config":
        return rel not in ("pybroker/config.py", "setup.py") and not rel.startswith("tests/") \
            and not rel.startswith("benchmarks/")
    if where == "not-store":
        return in_library and not rel.startswith("pybroker/store/")
    if where == "proc":
        return rel.startswith("pybroker/proc/")
    if where == "pyx":
        return rel.endswith((".pyx", ".pxd", ".pxi"))
    raise AssertionError(where)


def _function_lengths(path: pathlib.Path, text: str):
    """Yield (name, first line, line count) of every Python function in a .py file."""
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as error:
        yield ("<syntax error>", error.lineno or 0, 0)
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1


# A function or method, not a class (``cdef class B(A):`` names its base in parentheses).
_CYTHON_DEF = re.compile(r"^(\s*)(?:async\s+)?(?:cpdef|cdef|def)\s+(?!class\b)[^=]*\(")


def _cython_function_lengths(text: str):
    """Yield (name, first line, line count) for def/cdef/cpdef functions of a .pyx file."""
    lines = text.splitlines()
    starts = [(i, len(m.group(1))) for i, line in enumerate(lines)
              if (m := _CYTHON_DEF.match(line))]
    for index, indent in starts:
        end = index + 1
        while end < len(lines):
            line = lines[end]
            if line.strip() and (len(line) - len(line.lstrip())) <= indent \
                    and not line.lstrip().startswith(("#", ")")):
                break
            end += 1
        while end > index + 1 and not lines[end - 1].strip():
            end -= 1
        yield lines[index].strip()[:40], index + 1, end - index


def check_file(root: pathlib.Path, path: pathlib.Path) -> list[str]:
    rel = path.relative_to(root).as_posix()
    text = path.read_text(encoding="utf-8")
    problems = []
    lines = text.splitlines()
    if len(lines) > FILE_LINES_MAX:
        problems.append(f"{rel}: {len(lines)} lines > {FILE_LINES_MAX} -> split by responsibility")
    for number, line in enumerate(lines, 1):
        if len(line) > LINE_COLUMNS_MAX:
            problems.append(f"{rel}:{number}: line of {len(line)} columns > {LINE_COLUMNS_MAX}")
        for pattern, where, advice in BANS:
            if _applies(where, rel) and pattern.search(line) and "tidy: allow" not in line:
                problems.append(f"{rel}:{number}: {advice}")
    if path.suffix == ".py":
        lengths = _function_lengths(path, text)
    elif path.suffix == ".pyx":
        lengths = _cython_function_lengths(text)
    else:
        lengths = ()
    for name, first_line, count in lengths:
        if count > FUNCTION_LINES_MAX:
            problems.append(f"{rel}:{first_line}: function {name} has {count} lines > "
                            f"{FUNCTION_LINES_MAX} -> split it (parent keeps control flow)")
    return problems


# protoc's output, vendored by tools/regen_grpc.py (which checks it against the protos).
GENERATED = re.compile(r"^pybroker/protocol/rocketmq_v2/\w+_pb2(_grpc)?\.pyi?$")


def source_files(root: pathlib.Path):
    yield root / "setup.py"
    for directory in SCANNED_DIRS:
        for path in sorted((root / directory).rglob("*")):
            if path.suffix in SOURCE_SUFFIXES and path.is_file() and \
                    not GENERATED.match(path.relative_to(root).as_posix()):
                yield path


# A module-level function of pybroker/ whose body (docstring aside) is another's, statement
# for statement, is a twin: two copies of one rule drift apart (style.md §8.9, rule 9).
TWIN_LINES_MIN = 3


def _module_function_bodies(text: str):
    """Yield (name, first line, fingerprint) of every module-level function of at least
    TWIN_LINES_MIN body lines whose ``def`` line does not say ``tidy: allow``."""
    lines = text.splitlines()
    for node in ast.parse(text).body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or \
                "tidy: allow" in lines[node.lineno - 1]:
            continue
        body = node.body
        if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
                isinstance(body[0].value.value, str):
            body = body[1:]
        if body and body[-1].end_lineno - body[0].lineno + 1 >= TWIN_LINES_MIN:
            yield node.name, node.lineno, \
                type(node).__name__ + ast.dump(node.args) + "".join(map(ast.dump, body))


def twin_functions(root: pathlib.Path, paths) -> list[str]:
    """Every module-level function of pybroker/ that repeats an earlier one's body."""
    first: dict[str, str] = {}
    problems = []
    for path in paths:
        rel = path.relative_to(root).as_posix()
        if not rel.startswith("pybroker/") or path.suffix != ".py":
            continue
        for name, line, fingerprint in _module_function_bodies(
                path.read_text(encoding="utf-8")):
            where = f"{rel}:{line} {name}"
            if fingerprint in first:
                problems.append(f"{rel}:{line}: function {name} is a twin of {first[fingerprint]}"
                                " -> keep one and import it")
            else:
                first[fingerprint] = where
    return problems


def main(argv: list[str]) -> int:
    root = pathlib.Path(argv[1] if len(argv) > 1 else pathlib.Path(__file__).parents[1])
    paths = list(source_files(root))
    problems = [p for path in paths for p in check_file(root, path)]
    problems += twin_functions(root, paths)
    for problem in problems:
        sys.stdout.write(problem + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
