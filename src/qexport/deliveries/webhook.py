"""Sending webhooks: one signed JSON POST per attempt, its answer judged here, once.

2xx is delivered; 408, 429, 5xx and network errors are retried; any other answer (including
a redirect, which is never followed) is permanent, since asking again would get the same.
A destination the egress policy refuses fails at once (`destination_refused`).

How the connection reaches the checked address and no other: the URL's host is resolved and
checked by the policy, then the request is sent to a URL whose host is that IP address, with
the original name in the `Host` header and as TLS SNI (httpcore's `sni_hostname` extension,
which is also the name the certificate is verified against). Nothing resolves the name a
second time. Proxies from the environment are ignored (`trust_env=False`: a proxy would
connect onwards by name; CA certificates still come from OpenSSL's defaults, which honour
SSL_CERT_FILE and SSL_CERT_DIR) and connections are not kept alive, so that a connection opened
for one name (its SNI, its certificate) is never reused for another name on the same IP.
The alternative, a custom httpcore network backend that swaps the address inside
`connect_tcp`, reaches into httpx's private pool; this one uses documented extensions only.

What members see of a failure is one readable reason per class; the connection-level
detail (addresses, ports, errno text) goes to the operator's log only.
"""

from __future__ import annotations

import ssl
from collections.abc import Collection
from types import TracebackType

import httpx2

from qexport.deliveries.errors import DeliveryError, refused_destination
from qexport.net.egress import (
    EgressPolicy,
    EgressRefusedError,
    IPAddress,
    UnresolvedError,
    check_webhook_host,
)

USER_AGENT = "qexport"
_RETRIED = frozenset({408, 429})
_DEFAULT_PORTS = {"http": 80, "https": 443}
CONNECT_FAILED = "could not connect to the receiver"
TIMED_OUT = "the receiver did not answer in time"


class WebhookSender:
    def __init__(
        self,
        *,
        timeout: float,
        policy: EgressPolicy | None = None,
        transport: httpx2.BaseTransport | None = None,
    ) -> None:
        self.timeout = timeout
        self.policy = policy or EgressPolicy()
        self._client = httpx2.Client(
            timeout=timeout,
            follow_redirects=False,
            trust_env=False,
            verify=ssl.create_default_context(),
            limits=httpx2.Limits(max_keepalive_connections=0),
            transport=transport,
        )

    def send(
        self,
        url: str,
        body: bytes,
        *,
        delivery_id: str,
        signature: str,
        hosts: Collection[str] | None = None,
    ) -> None:
        """POST `body` to `url`; DeliveryError unless the receiver answered 2xx. `hosts`: the
        workspace's webhook host names, when its admin restricted them."""
        self.post(
            url,
            body,
            headers={"X-QExport-Delivery": delivery_id, "X-QExport-Signature": signature},
            hosts=hosts,
        )

    def post(
        self,
        url: str,
        body: bytes,
        *,
        headers: dict[str, str],
        hosts: Collection[str] | None = None,
    ) -> None:
        """POST the JSON `body` with `headers` under the egress policy and the workspace's
        `hosts`, judged as above; shared by webhooks and the chat services' incoming webhooks."""
        target = _parse(url)
        host = target.raw_host.decode("ascii")
        port = target.port or _DEFAULT_PORTS[target.scheme]
        try:
            check_webhook_host(host, hosts)
            addresses = self.policy.resolve_checked(host, port)
        except EgressRefusedError as exc:
            raise refused_destination(exc.reason) from exc
        except UnresolvedError as exc:
            raise DeliveryError(CONNECT_FAILED, permanent=False, internal=str(exc)) from exc
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            **headers,
            "Host": target.netloc.decode("ascii"),
        }
        extensions = {"sni_hostname": host} if target.scheme == "https" else {}
        response = self._post(target, addresses, body, headers, extensions)
        status = response.status_code
        if 200 <= status < 300:
            return
        answer = f"the receiver answered HTTP {status}"
        if 300 <= status < 400:
            answer += " (redirects are not followed)"
        raise DeliveryError(answer, permanent=not (status in _RETRIED or status >= 500))

    def _post(
        self,
        target: httpx2.URL,
        addresses: list[IPAddress],
        body: bytes,
        headers: dict[str, str],
        extensions: dict[str, str],
    ) -> httpx2.Response:
        """Try the checked addresses in order until one connects."""
        failure: DeliveryError | None = None
        for ip in addresses:
            url = target.copy_with(host=str(ip))
            try:
                return self._client.post(url, content=body, headers=headers, extensions=extensions)
            except httpx2.ConnectError as exc:  # this address refused us: try the next
                failure = DeliveryError(
                    CONNECT_FAILED, permanent=False, internal=f"{ip}: {exc or type(exc).__name__}"
                )
            except httpx2.TimeoutException as exc:
                raise DeliveryError(
                    TIMED_OUT, permanent=False, internal=f"{ip}: {type(exc).__name__}"
                ) from exc
            except httpx2.HTTPError as exc:
                raise DeliveryError(
                    CONNECT_FAILED, permanent=False, internal=f"{ip}: {exc or type(exc).__name__}"
                ) from exc
        assert failure is not None  # resolve_checked never returns an empty list
        raise failure

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> WebhookSender:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _parse(url: str) -> httpx2.URL:
    try:
        target = httpx2.URL(url)
    except httpx2.InvalidURL as exc:
        raise DeliveryError(
            "the webhook URL is not usable", permanent=True, internal=str(exc)
        ) from exc
    if target.scheme not in _DEFAULT_PORTS or not target.raw_host:
        raise DeliveryError("the webhook URL is not usable", permanent=True)
    return target
