"""adapya-era (Software AG's own URB DSECT maps) as a test oracle and benchmark baseline.

It decodes one message field by field through ``Datamap`` objects, the way its ``reptor``
module walks messages: header first, then each element by its length.  We use it only to check
our codec's field values and to measure a baseline; no code of it is copied into the product.

Normalisation applied to its values so they compare with ours: character fields lose trailing
blanks and zeros; one-byte ``Bytes`` fields (URBTARC, URBIARC) become ints.
"""

from __future__ import annotations

from typing import Any

from adapya.era import urb as era

_MAPS = {
    "URBH": era.Urbh,
    "URBT": era.Urbt,
    "URBR": era.Urbr,
    "URBD": era.Urbd,
    "URBE": era.Urbe,
    "URBC": era.Urbc,
    "URBS": era.Urbs,
    "URBU": era.Urbu,
    "URBF": era.Urbf,
    "URBI": era.Urbi,
}


class Oracle:
    """adapya-era datamaps for one form (EBCDIC/ASCII, big/little endian)."""

    def __init__(self, ebcdic: bool, big_endian: bool) -> None:
        self.maps = {}
        for eye, cls in _MAPS.items():
            dm = cls(buffer=None, offset=0)
            dm.setEbcdic(ebcdic)
            if big_endian:
                dm.setNetworkByteOrder()
            else:
                dm.setNativeByteOrder()  # this box is little endian
            self.maps[eye] = dm
        self.names = {
            eye: [k for k in dm.keylist if not k.startswith("filler")]
            for eye, dm in self.maps.items()
        }

    def decode(self, data: bytes) -> list[tuple[str, dict[str, Any]]]:
        """[(eye, {field: value})] for the header and every element, every field read."""
        out = []
        buf = bytearray(data)  # adapya's datamaps expect a writable buffer
        hh = self.maps["URBH"]
        hh.buffer = buf
        hh.offset = 0
        out.append(("URBH", {k: getattr(hh, k) for k in self.names["URBH"]}))
        total = hh.urbhlent
        off = hh.urbhlen
        eye_map = self.maps["URBH"]
        while off < total:
            eye_map.offset = off
            eye = hh.buffer[off : off + 4]
            eye = eye.decode("cp037" if eye[:1] == b"\xe4" else "latin-1")
            dm = self.maps[eye]
            dm.buffer = buf
            dm.offset = off
            length = getattr(dm, f"{eye.lower()}len")
            out.append((eye, {k: getattr(dm, k) for k in self.names[eye]}))
            off += length
        return out


def normalise(value: Any) -> Any:
    if isinstance(value, str):
        return value.rstrip(" \x00")
    if isinstance(value, bytes | bytearray):
        return value[0] if len(value) == 1 else bytes(value)
    return value
