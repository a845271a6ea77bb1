"""Calls to shard actors that survive a restart: sent again once Ray has brought the actor back.

A shard actor made with ``max_restarts`` comes back from its folder when its process dies; a call that was
in flight fails with ``RayActorError`` (it may or may not have run), and calls sent meanwhile wait for
the new incarnation. ``ShardCall`` sends such a failed call again until it answers or ``timeout``
seconds have passed since it was first waited for (or, for a call nobody waits for, since it first
failed): then ``ShardUnavailableError``. An error raised by the actor's method itself (a bad input) is
raised as that error, not wrapped in Ray's ``RayTaskError``. Sending a call again is right for what a
learner sends (draws, priority updates: setting a priority twice sets it once), and at-least-once for an
``add_episode``: an episode whose commit finished just before the process died is stored twice.
"""

from __future__ import annotations

import time
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from ..errors import ShardUnavailableError
from ..options import number

__all__ = ["ShardCall", "ShardUnavailableError", "call_shard"]

BACKOFF = (0.02, 0.5)  # the first and the longest pause before a failed call is sent again


def timeout_option(value: Any) -> float:
    return number(value, "timeout", low=0.0, low_open=True)


def unwrapped(error: RayTaskError) -> BaseException:
    """The exception the actor's method raised (with its message as the library words it)."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error


class ShardCall:
    """``actor.<method>.remote(*args, **kwargs)``, sent again after the actor died (see the module)."""

    __slots__ = ("actor", "method", "args", "kwargs", "timeout", "what", "ref", "deadline", "pause")

    def __init__(self, actor: Any, method: str, *args: Any, timeout: float = 60.0, what: str = "a shard",
                 **kwargs: Any):
        self.actor, self.method, self.args, self.kwargs = actor, method, args, kwargs
        self.timeout, self.what = timeout_option(timeout), what
        self.deadline: float | None = None
        self.pause = BACKOFF[0]
        self.ref = self._send()

    def _send(self):
        return getattr(self.actor, self.method).remote(*self.args, **self.kwargs)

    def _unavailable(self, reason: str) -> ShardUnavailableError:
        return ShardUnavailableError(
            f"{self.what} did not answer {self.method}() within {self.timeout:g} s ({reason}): its actor died and "
            f"was not restarted (make it with max_restarts, e.g. create_shard(...); or it spent them all), or it "
            f"is still restarting (pass a longer timeout=)")

    def _again(self, error: RayActorError, *, wait: bool) -> None:
        """Send the call again, unless the deadline has passed or the actor could not start."""
        if getattr(error, "actor_init_failed", False):  # its constructor raised: no restart will help
            lines = [line.strip() for line in str(getattr(error, "error_msg", error)).splitlines() if line.strip()]
            raise ShardUnavailableError(f"{self.what} could not start, so it cannot answer {self.method}(): its "
                                        f"constructor raised {lines[-1] if lines else error!r}; fix what was given "
                                        f"to create_shard (or to the folder)") from error
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + self.timeout
        if now >= self.deadline:
            raise self._unavailable(f"last error: {type(error).__name__}") from error
        if wait:
            time.sleep(min(self.pause, max(0.0, self.deadline - now)))
            self.pause = min(2 * self.pause, BACKOFF[1])
        self.ref = self._send()

    def result(self) -> Any:
        """Wait for the answer (sending the call again across a restart), or raise."""
        if self.deadline is None:
            self.deadline = time.monotonic() + self.timeout
        while True:
            try:
                return ray.get(self.ref, timeout=max(0.0, self.deadline - time.monotonic()))
            except RayTaskError as error:
                raise unwrapped(error) from error
            except GetTimeoutError:
                raise self._unavailable("no answer") from None
            except RayActorError as error:
                self._again(error, wait=True)

    def poll(self) -> tuple[bool, Any]:
        """For a call whose ref is ready: (True, its answer), or (False, None) if it was sent again."""
        try:
            return True, ray.get(self.ref, timeout=0)
        except RayTaskError as error:
            raise unwrapped(error) from error
        except RayActorError as error:
            self._again(error, wait=False)
            return False, None


def call_shard(actor: Any, method: str, *args: Any, timeout: float = 60.0, **kwargs: Any) -> Any:
    """``ray.get(actor.<method>.remote(*args, **kwargs))``, sent again if the actor dies and Ray restarts it
    (e.g. an env actor's ``call_shard(shard, "add_episode", episode)``); ``ShardUnavailableError`` after
    ``timeout`` seconds."""
    return ShardCall(actor, method, *args, timeout=timeout, **kwargs).result()
