"""Where a decode step's time goes, for benchmarks (`ModelRunner.timings`, off unless set): the host seconds spent
filling each step's output-constraint masks and queueing its sampling (a queueing that lasts about a forward pass
means something in it waits for the device), and on CUDA the device's forward pass, its wait for the sampling to
be queued (what a mask fill that the forward pass does not hide costs the device) and the sampling itself.

Device figures come from CUDA events recorded around the step's work in the device's queue; they are read once the
events have run (`device_ms`), so recording them never makes the host wait.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class StepTiming:
    """One launched step that sampled: its tokens, sample rows, the constrained ones, and its events."""

    num_tokens: int  # input tokens of the step: as many as its rows for a decode step
    rows: int
    constrained_rows: int
    fill_s: float = 0.0  # host seconds filling the masks (0 without constrained rows)
    queue_s: float = 0.0  # host seconds queueing the sampling, masks' copy and application included
    events: list[torch.cuda.Event] = field(default_factory=list)  # before/after forward, before/after sampling

    def device_ms(self) -> tuple[float, float, float] | None:
        """(forward, wait for the sampling to be queued, sampling) in device milliseconds; None off CUDA."""
        if len(self.events) != 4:
            return None
        forward_start, forward_end, sampling_start, sampling_end = self.events
        sampling_end.synchronize()
        return (forward_start.elapsed_time(forward_end), forward_end.elapsed_time(sampling_start),
                sampling_start.elapsed_time(sampling_end))


class StepTimings:
    """The timings of every step a runner launched since the last `take`."""

    def __init__(self) -> None:
        self._steps: list[StepTiming] = []

    def start(self, num_tokens: int, rows: int, constrained_rows: int, device: torch.device) -> StepTiming:
        """A step's record, its first event (before the forward pass) recorded on CUDA."""
        timing = StepTiming(num_tokens, rows, constrained_rows)
        self._steps.append(timing)
        mark(timing, device)
        return timing

    def take(self) -> list[StepTiming]:
        steps, self._steps = self._steps, []
        return steps


def mark(timing: StepTiming | None, device: torch.device) -> None:
    """Records the step's next event in the device's queue (nothing without a record or off CUDA)."""
    if timing is not None and device.type == "cuda":
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        timing.events.append(event)
