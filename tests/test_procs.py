"""Children tracecost starts: a deadline kills a child that will not finish, waiting leaves no thread
behind, and a child's sleeps are counted."""

import signal
import threading

import pytest

from tracecost.errors import TracecostError
from tracecost.procs import Child, started


def test_a_child_past_its_deadline_is_killed_and_marked_timed_out(tmp_path):
    with started(lambda: Child(["sleep", "30"], stderr_path=tmp_path / "sleep.err")) as child:
        usage = child.wait(timeout_s=0.2)
    assert usage.timed_out and usage.exit_code == -signal.SIGKILL
    assert usage.wall_s < 10


def test_a_child_that_finishes_in_time_keeps_its_exit_status(tmp_path):
    with started(lambda: Child(["sh", "-c", "exit 3"], stderr_path=tmp_path / "sh.err")) as child:
        usage = child.wait(timeout_s=30)
    assert not usage.timed_out and usage.exit_code == 3


def test_waiting_with_a_deadline_starts_no_thread(tmp_path, monkeypatch):
    # A thread alive at Ctrl-C would hold up interpreter exit until its deadline.
    def no_threads(_thread):
        raise AssertionError("Child.wait started a thread")

    with started(lambda: Child(["sleep", "0.3"], stderr_path=tmp_path / "sleep.err")) as child:
        monkeypatch.setattr(threading.Thread, "start", no_threads)
        assert child.wait(timeout_s=60).exit_code == 0


def test_a_child_that_sleeps_counts_its_sleeps(tmp_path):
    # Five separate sleeps: at least five voluntary context switches, counted by the kernel.
    script = "import time\nfor _ in range(5): time.sleep(0.01)"
    with started(lambda: Child(["python3", "-c", script], stderr_path=tmp_path / "py.err")) as child:
        usage = child.wait(timeout_s=30)
    assert usage.exit_code == 0 and usage.voluntary_switches >= 5


def test_a_childs_last_output_larger_than_a_pipe_is_read_as_it_comes(tmp_path):
    # A map dump printed on SIGINT, as `uebpf attach` does: unread, it would fill the pipe and the
    # child would never exit.
    script = (
        "import signal, sys\nprint('READY', flush=True)\nsignal.sigwait({signal.SIGINT})\n"
        "sys.stdout.write('x' * (4 << 20) + '\\n')"
    )
    argv = ["python3", "-c", f"import signal; signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGINT}})\n{script}"]
    with started(lambda: Child(argv, stderr_path=tmp_path / "py.err")) as child:
        child.wait_for_line("READY", timeout_s=30)
        child.send(signal.SIGINT)
        assert len(child.read_until_exit(timeout_s=30)) == (4 << 20) + 1
        assert child.wait(timeout_s=30).exit_code == 0


def test_a_child_whose_output_does_not_end_is_killed(tmp_path):
    with started(lambda: Child(["sleep", "30"], stderr_path=tmp_path / "sleep.err")) as child:
        with pytest.raises(TracecostError, match="did not finish its output within 0.2 s"):
            child.read_until_exit(timeout_s=0.2)
        assert child.usage.exit_code == -signal.SIGKILL
