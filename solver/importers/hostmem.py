"""Host memory bandwidth from what people know about their machine: a rate, or the memory it has.

``solve rig new --host-bandwidth`` takes either a rate (``80 GB/s``) or a memory description:
``DDR5-5600x2``, ``2x DDR5-5600``, ``dual-channel DDR5-5600``, ``8ch DDR4-3200``. A description gives the
nominal rate, ``MT/s x 8 bytes x channels`` (a DDR channel is 64 bits wide; a DDR5 DIMM's two 32-bit
subchannels count as one channel, as boards count them), and the rig gets the effective rate, the
nominal one times HOST_EFFICIENCY: the share a CPU streaming offloaded expert weights reaches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from solver.units import format_rate, parse_rate

#: Share of the nominal DDR rate that llama.cpp's CPU expert kernels reach. 0.5 is a conservative
#: placeholder (STREAM-like reads reach 60-80% of nominal; matrix-vector kernels on quantised weights
#: reach less); tune it here from measured public llama.cpp runs. The rig's comment shows both rates.
HOST_EFFICIENCY = 0.5

#: MT/s each DDR generation runs at, generously (overclocked kits included).
DDR_MTS: dict[str, tuple[int, int]] = {"DDR3": (800, 3200), "DDR4": (1600, 6000), "DDR5": (3200, 12000)}
#: Most memory channels one machine has: 12 per socket on two sockets.
MAX_CHANNELS = 24
_WORDS = {"single": 1, "dual": 2, "triple": 3, "quad": 4, "hexa": 6, "octa": 8}
_COUNT = r"(?P<{}>\d+|single|dual|triple|quad|hexa|octa)"
_DESCRIPTION = re.compile(
    r"^\s*(?:" + _COUNT.format("pre") + r"\s*(?:x|\*|-?\s*ch(?:annels?)?)\s*)?"
    r"(?P<kind>DDR\d)\s*-?\s*(?P<mts>\d+)(?:\s*MT/s)?"
    r"(?:\s*(?:x|\*)\s*(?P<post>\d+)|\s+" + _COUNT.format("post_ch") + r"\s*-?\s*ch(?:annels?)?)?\s*$",
    re.IGNORECASE,
)
FORMS = "a rate like '80 GB/s' or a memory description like 'DDR5-5600x2', '2x DDR5-5600' or '8ch DDR4-3200'"


@dataclass(frozen=True)
class HostRate:
    """The effective host bandwidth (bytes per second) and, for a memory description, how it was got."""

    effective: int
    nominal: int | None = None
    description: str | None = None
    mts: int | None = None
    channels: int | None = None

    @property
    def comment(self) -> str:
        """One line on where the figure comes from."""
        if self.nominal is None:
            return "as given: the rate the CPU reads offloaded expert weights at"
        return (
            f"{self.description}: {format_rate(self.nominal)} nominal ({self.mts} MT/s x 8 B x "
            f"{self.channels} ch) x {HOST_EFFICIENCY:g}"
        )


def parse_host_bandwidth(text: str) -> HostRate:
    """The host bandwidth ``text`` gives; ValueError saying the forms it takes when it gives none."""
    if text.strip().endswith(("/s", "/S")) and not re.search(r"mt/s", text, re.IGNORECASE):
        try:
            return HostRate(parse_rate(text))
        except ValueError as exc:
            raise ValueError(f"{exc}; or a memory description like 'DDR5-5600x2'") from None
    m = _DESCRIPTION.match(text)
    if not m:
        raise ValueError(f"expected {FORMS}, got {text!r}")
    kind = m.group("kind").upper()
    mts = int(m.group("mts"))
    counts = [c for c in (m.group("pre"), m.group("post"), m.group("post_ch")) if c]
    if kind not in DDR_MTS:
        raise ValueError(f"{text!r}: give DDR3, DDR4 or DDR5 memory, or the rate itself like '80 GB/s'")
    low, high = DDR_MTS[kind]
    if not low <= mts <= high:
        raise ValueError(f"{text!r}: {kind} runs at {low}-{high} MT/s, not {mts}")
    if not counts:
        raise ValueError(
            f"{text!r}: say how many memory channels, e.g. '{kind}-{mts}x2' (a desktop: two channels "
            f"whatever the number of DIMMs) or '8ch {kind}-{mts}' (a server)"
        )
    if len(counts) > 1:
        raise ValueError(f"{text!r}: give the number of channels once")
    channels = _WORDS.get(counts[0].lower()) or int(counts[0])
    if not 1 <= channels <= MAX_CHANNELS:
        raise ValueError(f"{text!r}: {channels} channels; a machine has 1 to {MAX_CHANNELS}")
    nominal = mts * 10**6 * 8 * channels
    return HostRate(
        effective=int(nominal * HOST_EFFICIENCY),
        nominal=nominal,
        description=f"{kind}-{mts} x{channels}",
        mts=mts,
        channels=channels,
    )
