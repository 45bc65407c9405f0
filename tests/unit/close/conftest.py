"""pytest fixtures of the close tests."""

from close_fixture import fake_task_env  # noqa: F401
