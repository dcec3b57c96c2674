"""Which (destination, subscription) key each element of a replicator message belongs to.

One set of rules for both places that need them: the decode stage, which only scans a
message's name fields to emit one row per key (``pipeline.urb.scan``), and the state stage,
which decodes the message in full and keeps its key's elements. An element the two sent to
different keys would be lost without a trace (tests/unit/integration/test_decode_routing.py), so
the rules live here, once, and work on any element with ``eye`` and ``fields``.

The rules (the Kafka key routes nothing: a real connector writes none):
- data elements take the subscription their message names (R7: a message carries one
  subscription; URBT, URBC and URBE name it);
- a status that names no subscription (STRT, REST, TERM …) belongs to its destination's key
  (destination, ""); STRT/REST also reach every configured subscription of the destination
  as *echoes* (numbering restarts there too: R8; only the destination key
  lands them);
- replies (TRSP, SUBS …) belong to the subscription and destination they name; one naming no
  destination (seed 000's examples) goes to the topic's destination when it carries that
  subscription, else the subscription's only destination; INST replies name no
  subscription: the key whose request they answer (its token and definition), else the one
  subscription whose conf names their initial state;
- a GFFT in a message that names no subscription goes to every configured subscription of
  the destination whose files cover its (dbid, fnr), else the destination key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

#: Statuses that restart the replicator's numbering (R8).
RESTART_STATUS = frozenset({"STRT", "REST"})
#: The field that names the subscription in each kind of data element.
SNAM_FIELD = {"URBT": "urbtsnam", "URBC": "urbcsnam", "URBE": "urbesnam"}

Key = tuple[str, str]  # (destination, subscription)
Target = tuple[Key, bool]  # a key an element goes to, and whether it is only an echo there


class Covered(NamedTuple):
    """A configured subscription of a destination: its files as (dbid, fnr) (conf: a
    subscription may span databases)."""

    subscription: str
    files: frozenset[tuple[int, int]]


def subscription_of(elements: Sequence[Any]) -> str:
    """R7: a message carries one subscription; URBT/URBC/URBE name it ('' if none)."""
    for el in elements:
        name = el.fields.get(SNAM_FIELD.get(el.eye, ""), "")
        if name:
            return name
    return ""


@dataclass(frozen=True)
class Router:
    """The conf the rules need: each destination's configured subscriptions (``covered``),
    a subscription's only destination (``home``), the subscription naming each initial-state
    definition (``initial_states``) and the key that sent each of the job's INST requests,
    by (definition, token) (``inst_routes``)."""

    covered: Mapping[str, Sequence[Covered]] = field(default_factory=dict)
    home: Mapping[str, str] = field(default_factory=dict)
    initial_states: Mapping[str, str] = field(default_factory=dict)
    inst_routes: Mapping[tuple[str, str], Key] = field(default_factory=dict)

    def targets(self, destination: str, elements: Sequence[Any]) -> list[tuple[Target, ...]]:
        """Where every element goes, in order."""
        sub = subscription_of(elements)
        out: list[tuple[Target, ...]] = []
        for el in elements:
            if el.eye == "URBS":
                out.append(self._status_targets(destination, el))
            elif el.eye == "URBF" and not sub:
                out.append(self._gfft_targets(destination, el))
            else:
                out.append((((destination, sub), False),))
        return out

    def keys(self, destination: str, elements: Sequence[Any]) -> list[Key]:
        """Each distinct key of the elements once, in the order they first appear (a message
        without elements belongs to its destination's key)."""
        keys = list(dict.fromkeys(k for targets in self.targets(destination, elements)
                                  for k, _ in targets))
        return keys or [(destination, "")]

    def _status_targets(self, destination: str, el: Any) -> tuple[Target, ...]:
        """A status's own key; a destination-wide STRT/REST also echoes to every configured
        subscription of that destination."""
        key = self._status_key(destination, el)
        if key[1] or el.fields.get("urbsst") not in RESTART_STATUS:
            return ((key, False),)
        echoes = tuple(((key[0], c.subscription), True) for c in self.covered.get(key[0], ()))
        return ((key, False), *echoes)

    def _gfft_targets(self, destination: str, el: Any) -> tuple[Target, ...]:
        dbid, fnr = el.fields.get("urbfdbid"), el.fields.get("urbffnr")
        subs = tuple(((destination, c.subscription), False)
                     for c in self.covered.get(destination, ()) if (dbid, fnr) in c.files)
        return subs or (((destination, ""), False),)

    def _status_key(self, destination: str, el: Any) -> Key:
        fields = el.fields
        snam = fields.get("urbssnam") or ""
        if not snam and fields.get("urbsrt") == "INST":
            asked = self.inst_routes.get((fields.get("urbsinam") or "",
                                          fields.get("urbsrtok") or ""))
            if asked is not None:  # one of the job's requests: the key that sent it
                return asked
            snam = self.initial_states.get(fields.get("urbsinam") or "", "")
        return (fields.get("urbsdnam") or self._blank_dnam(destination, snam), snam)

    def _blank_dnam(self, destination: str, snam: str) -> str:
        """The destination of a status naming a subscription but no destination: the
        topic's own when it carries that subscription — a SUBS copied to an output
        destination is about that destination's sequence — else the subscription's only
        destination from conf."""
        if any(c.subscription == snam for c in self.covered.get(destination, ())):
            return destination
        return self.home.get(snam) or destination
