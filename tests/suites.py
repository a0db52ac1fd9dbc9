"""Which tests `make test` leaves to `make test-slow` (conftest marks them; a test checks them)."""

from __future__ import annotations

#: Tests of many minutes, each training in several processes: `make test-slow` runs them (CI
#: too), `make test` does not. Paths relative to tests/: a whole directory, a file, or one test
#: (`file::name`, every parametrization of it).
SLOW = (
    "local/",  # `trainium run` end to end: TorchX, torchrun, precompile, then training
    "trainer/test_elastic.py",  # native shrink-and-grow runs of 3 compiled processes
    "trainer/test_native.py",  # torch.compile runs
    "trainer/test_preemption.py",  # SIGTERM under torchrun, then resume
    "trainer/test_resume.py",  # killed and resumed runs compared with uninterrupted ones
    # Killed (or SIGTERMed) mid background write, resumed, compared with uninterrupted runs.
    "trainer/test_async_checkpoint.py::test_a_kill_during_a_background_write_resumes_from_the_last_complete_checkpoint",
    "trainer/test_async_checkpoint.py::test_sigterm_waits_for_the_pending_write_and_checkpoints_the_stop",
    "trainer/test_async_checkpoint.py::test_two_gloo_processes_agree_on_the_step_to_resume_from_either_tier",
    # The four slowest trainer tests of `make test` (17-27 s each on 2 cores, 3-4 trainer
    # processes apiece, ~9 s of CPU each for torch's and transformers' imports): issue 34 item 1.
    "trainer/test_training.py::test_stdout_is_json_lines_only",
    "trainer/test_training.py::test_two_process_ddp_matches_one_process",
    "trainer/test_training.py::test_tiny_model_with_the_defaults_learns_in_40_steps",
    "trainer/test_rendezvous_launch.py::test_another_node_dials_pod_0",
)
