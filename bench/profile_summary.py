"""Summarise py-spy raw (collapsed) stacks: where the samples go, with our own code singled out.

    python bench/profile_summary.py /tmp/profile.txt [--top 15]

"Attributed" charges each sample to the deepest frame of our code on its stack (our function plus the
library code it calls, minus our callees); that is the list to act on. "Inclusive" counts a function
once per stack it appears on; "self" is the innermost frame, whoever owns it.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

OUR_PACKAGES = ("modelgate/proxy/", "modelgate/plugins/", "modelgate/cabinet/", "modelgate/config/")
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^():]+)(?::\d+)?\)$")
# Start-up frames under which the event loop runs: every sample has them, so they explain nothing.
_ENTRY_POINTS = frozenset(
    {
        "<module> (modelgate/cli.py)",
        "main (modelgate/cli.py)",
        "cmd_serve (modelgate/cli.py)",
        "run (modelgate/server.py)",
        "_run_loop (modelgate/server.py)",
        "_worker_main (modelgate/server.py)",
    }
)


@dataclass(frozen=True, slots=True)
class Profile:
    """Sample counts by function, three ways."""

    samples: int
    self_time: Counter[str]
    attributed: Counter[str]
    inclusive: Counter[str]


def _function(frame: str) -> tuple[str, bool]:
    """`function (file)` without the line number, and whether the file is ours."""
    match = _FRAME.match(frame)
    if match is None:
        return frame, False
    name = f"{match['function']} ({match['file']})"
    return name, match["file"].startswith(OUR_PACKAGES) and name not in _ENTRY_POINTS


def read_profile(path: Path) -> Profile:
    """Parse py-spy `--format raw` output: one `frame;frame;…;leaf COUNT` line per distinct stack."""
    samples = 0
    self_time: Counter[str] = Counter()
    attributed: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_function(f) for f in stack.split(";") if not f.startswith("process ")]
        if not frames:
            continue
        samples += count
        self_time[frames[-1][0]] += count
        ours = [name for name, is_ours in frames if is_ours]
        attributed[ours[-1] if ours else "(no frame of ours: aiohttp server/client, event loop)"] += count
        for name in set(ours):
            inclusive[name] += count
    return Profile(samples, self_time, attributed, inclusive)


def render(profile: Profile, top: int = 15) -> str:
    """Three ranked lists with the share of all samples."""
    total = max(1, profile.samples)

    def ranked(title: str, counter: Counter[str]) -> list[str]:
        rows = [f"{title}:"]
        rows += [f"  {count / total:6.1%}  {name}" for name, count in counter.most_common(top)]
        return rows

    lines = [f"{profile.samples} samples"]
    lines += ranked("attributed to our code (deepest proxy/plugins/cabinet/config frame)", profile.attributed)
    lines += ranked("inclusive, our functions", profile.inclusive)
    lines += ranked("self (innermost frame, any code)", profile.self_time)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="summarise a py-spy raw profile")
    parser.add_argument("path", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    print(render(read_profile(args.path), args.top))


if __name__ == "__main__":
    main()
