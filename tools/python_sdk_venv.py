# A virtual environment with RocketMQ 5's Python SDK (rocketmq-python-client), as README makes it.
"""README's gRPC quick start installs rocketmq-python-client into a virtual environment of its
own (its package is named ``rocketmq``, like PyPI's C++ client, so it never goes beside
pybroker). This makes the same environment once, pinned, under ``~/.cache/pybroker``, for the
test that runs the quick start (tests/compat/test_readme_grpc.py) and for tools that drive the
SDK (tools/bench_grpc.py).

Usage::

    python3 tools/python_sdk_venv.py            # create it (no-op when complete); print its python
"""
import pathlib
import shutil
import subprocess
import sys
import venv

SDK_VERSION = "5.1.2"
VENV_DIR = pathlib.Path.home() / ".cache" / "pybroker" / f"python-sdk-venv-{SDK_VERSION}"
_COMPLETE = ".complete"


class SdkVenvError(RuntimeError):
    """The environment could not be made (no network, pip failed)."""


def python_path(directory: pathlib.Path = VENV_DIR) -> pathlib.Path:
    return directory / "bin" / "python"


def ensure(directory: pathlib.Path = VENV_DIR, timeout_s: float = 900) -> pathlib.Path:
    """The environment's python, made first when missing or incomplete."""
    if (directory / _COMPLETE).is_file():
        return python_path(directory)
    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    venv.EnvBuilder(with_pip=True).create(staging)
    argv = [str(python_path(staging)), "-m", "pip", "install", "-q",
            "--disable-pip-version-check", f"rocketmq-python-client=={SDK_VERSION}"]
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as error:
        raise SdkVenvError(f"pip overran {timeout_s} s") from error
    if run.returncode != 0:
        raise SdkVenvError(f"pip failed ({run.returncode}):\n{run.stderr[-3000:]}")
    (staging / _COMPLETE).write_text(SDK_VERSION)
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)
    # A venv's scripts name the path it was made at; the python binary itself does not.
    return python_path(directory)


if __name__ == "__main__":
    try:
        sys.stdout.write(f"{ensure()}\n")
    except SdkVenvError as error:
        sys.stderr.write(f"{error}\n")
        sys.exit(1)
