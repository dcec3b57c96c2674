"""Why Kafka refused us, in one line: authentication, TLS, or authorization.

A wrong password used to surface as "cannot reach Kafka … Broker transport failure" (librdkafka
reports the SASL failure through its error callback and the metadata request only times out),
which sends an operator after the network. ``classify`` is a pure function over what either
client family says — librdkafka error code names and texts, Java exception texts — and returns
the one line that names the problem: the mechanism, user and broker for authentication; the CA
or certificate file and the reason (unknown CA, hostname mismatch, expired) for TLS; the topic
or group and the operation for authorization. It never returns a secret: every secret the conf
holds is masked in any text it quotes.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pipeline.kafka_security import SECRET_KEYS, secret

if TYPE_CHECKING:
    from pipeline.config import Kafka

Kind = Literal["authentication", "tls", "authorization"]


@dataclass(frozen=True)
class Refusal:
    """Kafka refused the job: what kind of refusal, and the one line saying so."""

    kind: Kind
    message: str


_AUTH_CODES = {"_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "ILLEGAL_SASL_STATE",
               "UNSUPPORTED_SASL_MECHANISM"}
_AUTH_TEXT = re.compile(r"SaslAuthenticationException|SASL authentication (error|failed)|"
                        r"Authentication failed|Failed to authenticate|invalid credentials|"
                        r"Invalid username or password|Unexpected handshake request with "
                        r"client mechanism|LoginException|OAuth|token endpoint", re.IGNORECASE)
_TLS_CODES = {"_SSL"}
_TLS_TEXT = re.compile(r"SSL handshake failed|SSLHandshakeException|certificate verify failed|"
                       r"PKIX path|unable to find valid certification path|"
                       r"No subject alternative|CertificateExpiredException|"
                       r"certificate has expired|SSL routines|handshake_failure",
                       re.IGNORECASE)
_AUTHZ_CODES = {"TOPIC_AUTHORIZATION_FAILED": "topic", "GROUP_AUTHORIZATION_FAILED": "group",
                "CLUSTER_AUTHORIZATION_FAILED": "cluster",
                "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": "transactional id"}
_AUTHZ_TEXT = re.compile(r"Not authorized to access (topics?|group|cluster)s?:?\s*\[?([^\]\n]*)",
                         re.IGNORECASE)
_BROKER = re.compile(r"(?:[a-z_]+://)?([A-Za-z0-9_.\-\[\]:]+:\d+)(?:/[\w-]+)?:")
_HOSTNAME = re.compile(r"hostname|No subject alternative|No name matching|"
                       r"IP address mismatch|does not match", re.IGNORECASE)
_EXPIRED = re.compile(r"expired|NotAfter|CertificateExpired", re.IGNORECASE)
_UNKNOWN_CA = re.compile(r"unable to get local issuer|self[- ]signed|unknown ca|PKIX path|"
                         r"unable to find valid certification path|unable to get issuer",
                         re.IGNORECASE)
#: alerts the BROKER sends when it does not accept the client's certificate (mutual TLS)
_CLIENT_CERT = re.compile(r"alert (bad certificate|certificate unknown|certificate required|"
                          r"unknown ca)|fatal alert: (bad_certificate|certificate_unknown|"
                          r"certificate_required|unknown_ca)", re.IGNORECASE)


def _secrets(kafka: Kafka) -> list[str]:
    found = []
    for name in SECRET_KEYS:
        try:
            value = secret(kafka, name)
        except ValueError:  # an unreadable *_file: nothing to mask from it
            continue
        if value:
            found.append(value)
    return found


def masked(text: str, kafka: Kafka) -> str:
    """``text`` on one line with every secret of the conf replaced by ``***``."""
    for value in _secrets(kafka):
        text = text.replace(value, "***")
    return " ".join(text.split())


def _broker(text: str, kafka: Kafka) -> str:
    match = _BROKER.search(text)
    return match[1] if match else kafka.bootstrap_servers


def _tls_reason(text: str, kafka: Kafka) -> str:
    ca = kafka.ssl_truststore_location or kafka.ssl_ca_location or "the system CA store"
    cert = kafka.ssl_certificate_location or kafka.ssl_keystore_location
    if _CLIENT_CERT.search(text):
        return (f"the broker refused the client certificate {cert or '(none given)'} "
                "(kafka.ssl_certificate_location / ssl_keystore_location)")
    if _HOSTNAME.search(text):
        return ("hostname mismatch: the broker's certificate does not name the host in "
                "kafka.bootstrap_servers (kafka.ssl_endpoint_identification)")
    if _EXPIRED.search(text):
        return "certificate expired (the broker's, or a CA's in its chain)"
    if _UNKNOWN_CA.search(text):
        return f"unknown CA: no CA in {ca} signed the broker's certificate"
    return f"certificate verify failed against {ca}"


def classify(text: str, kafka: Kafka, code: str | None = None) -> Refusal | None:
    """The refusal ``text`` (with librdkafka's error code name ``code``, if any) reports, or
    None when it is something else (an unreachable broker, a timeout)."""
    quoted = masked(text, kafka)
    if code in _AUTHZ_CODES or _AUTHZ_TEXT.search(text):
        match = _AUTHZ_TEXT.search(text)
        what = _AUTHZ_CODES.get(code or "") or (match[1].lower().rstrip("s") if match else "?")
        if what == "cluster":  # e.g. an idempotent producer allowed to write nowhere
            needs = "IDEMPOTENT_WRITE" if "idempoten" in text.lower() else None
            return denied("the cluster", "", needs, quoted)
        name = (match[2].strip() if match else "") or "?"
        return denied(what, name, None, quoted)
    if code in _TLS_CODES or _TLS_TEXT.search(text):
        return Refusal("tls", f"TLS handshake with {_broker(text, kafka)} failed: "
                              f"{_tls_reason(text, kafka)} ({quoted})")
    if code in _AUTH_CODES or _AUTH_TEXT.search(text):
        user = (kafka.sasl_username or kafka.sasl_kerberos_principal
                or kafka.sasl_oauthbearer_client_id or "?")
        return Refusal("authentication",
                       f"authentication failed: SASL {kafka.sasl_mechanism or '?'} as "
                       f"{user!r} at {_broker(text, kafka)} ({quoted})")
    return None


def denied(resource: str, name: str, operation: str | None, detail: str = "") -> Refusal:
    """The one-line authorization refusal naming the resource and the operation."""
    more = f" ({detail})" if detail else ""
    return Refusal("authorization",
                   f"authorization denied: the job's principal may not {operation or 'use'} "
                   f"{f'{resource} {name}'.strip()}{more}; grant it (README: Secured Kafka)")


def first_refusal(errors: Iterable[tuple[str | None, str]], kafka: Kafka) -> Refusal | None:
    """The first refusal among (code name, text) errors a client reported, or None."""
    for code, text in errors:
        refusal = classify(text, kafka, code)
        if refusal is not None:
            return refusal
    return None


class ClientErrors:
    """A librdkafka ``error_cb``: keeps the last errors a client reported (code name, text),
    so a failed first contact can say why. Bounded: a producer keeps it for the job's life."""

    def __init__(self, keep: int = 32) -> None:
        self._seen: deque[tuple[str | None, str]] = deque(maxlen=keep)

    def __call__(self, error: Any) -> None:
        self._seen.append((error.name(), error.str()))

    def refusal(self, kafka: Kafka, *also: Any) -> Refusal | None:
        """The first refusal among the errors seen and ``also`` (KafkaExceptions' errors)."""
        extra = [(e.name(), e.str()) if hasattr(e, "name") else (None, str(e)) for e in also]
        return first_refusal([*extra, *self._seen], kafka)
