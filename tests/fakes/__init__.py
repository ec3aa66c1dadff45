"""Real HTTP fake upstreams (OpenAI and Anthropic lookalikes) for the gateway's tests."""

from .faults import Fault
from .records import RecordedRequest
from .upstream import FakeUpstream

__all__ = ["FakeUpstream", "Fault", "RecordedRequest"]
