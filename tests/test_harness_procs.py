"""The harness leaves no process behind: a start that fails stops what it started (issue 34)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import procs
from harness import OperatorProcess

TESTS = Path(__file__).resolve().parent
E2E_CONFTEST = TESTS / "e2e" / "conftest.py"


def sleeper(pid_file: Path) -> list[str]:
    """An "operator" that logs a line, writes its pid and never answers its health check."""
    code = (
        "import os, sys, time; print('sleeper up, never healthy', flush=True);"
        f" open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)"
    )
    return [sys.executable, "-c", code]


def alive(pid: int) -> bool:
    """Whether pid runs (a zombie, dead but not yet reaped by its parent, does not count)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def read_pid(pid_file: Path) -> int:
    deadline = time.monotonic() + procs.scaled(30)
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, f"{pid_file} was never written"
        time.sleep(0.05)
    return int(pid_file.read_text())


def test_a_start_that_times_out_stops_the_process_and_raises_with_its_log(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    proc = OperatorProcess(sleeper(pid_file), tmp_path / "operator.log")
    try:
        with pytest.raises(RuntimeError) as failed:
            proc.start(timeout=3)
        pid = read_pid(pid_file)
        assert not alive(pid), f"the operator (pid {pid}) is still running"
        assert not proc.running
        assert "sleeper up, never healthy" in str(failed.value)  # the log's tail
        assert "no answer from http://127.0.0.1:" in str(failed.value)
    finally:
        if pid_file.exists() and pid_file.read_text() and alive(pid := int(pid_file.read_text())):
            os.kill(pid, signal.SIGKILL)


def test_a_start_whose_process_exits_fails_at_once(tmp_path: Path) -> None:
    code = "import sys; print('bad flag'); sys.exit(3)"
    proc = OperatorProcess([sys.executable, "-c", code], tmp_path / "operator.log")
    began = time.monotonic()
    with pytest.raises(RuntimeError, match=r"(?s)it exited 3.*bad flag"):
        proc.start(timeout=600)
    assert time.monotonic() - began < 60  # not the whole deadline


def test_the_e2e_operator_fixture_leaves_no_process_when_its_operator_never_answers(
    tmp_path: Path,
) -> None:
    """tests/e2e/conftest.py's `operator`, in a pytest of its own: the start errors and, before
    the next test runs, the process is gone (it was left running, one per test, before)."""
    pid_file = tmp_path / "pid"
    run = tmp_path / "run"
    run.mkdir()
    (run / "conftest.py").write_text(
        textwrap.dedent(f"""
        import importlib.util
        import pytest
        import harness

        spec = importlib.util.spec_from_file_location("e2e_conftest", {str(E2E_CONFTEST)!r})
        e2e = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(e2e)
        e2e.OPERATOR_COMMAND = {sleeper(pid_file)!r}
        harness.OPERATOR_START_SECONDS = 3
        operator = e2e.operator

        @pytest.fixture
        def crd():  # no emulator needed: the operator never gets as far as the API
            return None
        """)
    )
    (run / "test_leak.py").write_text(
        textwrap.dedent(f"""
        import os
        from pathlib import Path

        def test_a_needs_the_operator(operator):
            raise AssertionError("never reached: the operator never answers")

        def test_b_nothing_is_left():
            pid = int(Path({str(pid_file)!r}).read_text())
            stat = Path(f"/proc/{{pid}}/stat")
            assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z", (
                f"operator pid {{pid}} still runs"
            )
        """)
    )
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    )
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
             "--rootdir", str(run), str(run)],
            cwd=run, env=env, capture_output=True, text=True, timeout=procs.scaled(120),
        )  # fmt: skip
        out = done.stdout + done.stderr
        assert "1 passed, 1 error" in out, out
        assert "sleeper up, never healthy" in out, out  # the error carries the operator's log
    finally:
        if pid_file.exists() and pid_file.read_text() and alive(pid := int(pid_file.read_text())):
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"the operator (pid {pid}) outlived its pytest")


def test_a_sigterm_to_pytest_stops_what_its_fixtures_started(tmp_path: Path) -> None:
    """A run cut short (`timeout`, CI's limit) tears its fixtures down: a process a session
    fixture started in a session of its own (as the tier's control plane is) is gone after."""
    pid_file, run = tmp_path / "pid", tmp_path / "run"
    run.mkdir()
    (run / "conftest.py").write_text(
        textwrap.dedent(f"""
        import subprocess
        import pytest
        import procs

        def pytest_configure(config):
            procs.stop_on_sigterm()

        @pytest.fixture(scope="session")
        def plane():
            argv = {sleeper(pid_file)!r}
            proc = procs.track(subprocess.Popen(argv, start_new_session=True))
            yield proc
            procs.stop_tree(proc, grace=5)
        """)
    )
    (run / "test_cut.py").write_text("import time\n\ndef test_long(plane):\n    time.sleep(600)\n")
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
           "--rootdir", str(run), str(run)]  # fmt: skip
    pid = None
    with procs.spawned(
        cmd, cwd=run, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as run_:
        try:
            pid = read_pid(pid_file)
            run_.send_signal(signal.SIGTERM)
            run_.wait(timeout=procs.scaled(60))
            deadline = time.monotonic() + procs.scaled(10)
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not alive(pid), f"the fixture's process (pid {pid}) outlived its pytest"
        finally:
            if pid is not None and alive(pid):
                os.kill(pid, signal.SIGKILL)
