"""The queue of GPU requests that wait for a free GPU: position, estimate of the wait, wording."""

from jupyter_gpuburst.hub.queue.estimate import Estimate, WaitHistory, estimate, line_message

__all__ = ["Estimate", "WaitHistory", "estimate", "line_message"]
