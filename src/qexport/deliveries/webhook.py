"""Sending webhooks: one signed JSON POST per attempt, its answer judged here, once.

2xx is delivered; 408, 429, 5xx and network errors are retried; any other answer (including
a redirect, which is never followed) is permanent, since asking again would get the same.
"""

from __future__ import annotations

from types import TracebackType

import httpx2

from qexport.deliveries.errors import DeliveryError

USER_AGENT = "qexport"
_RETRIED = frozenset({408, 429})


class WebhookSender:
    def __init__(self, *, timeout: float, transport: httpx2.BaseTransport | None = None) -> None:
        self.timeout = timeout
        self._client = httpx2.Client(timeout=timeout, follow_redirects=False, transport=transport)

    def send(self, url: str, body: bytes, *, delivery_id: str, signature: str) -> None:
        """POST `body` to `url`; DeliveryError unless the receiver answered 2xx."""
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "X-QExport-Delivery": delivery_id,
            "X-QExport-Signature": signature,
        }
        try:
            response = self._client.post(url, content=body, headers=headers)
        except httpx2.TimeoutException as exc:
            raise DeliveryError(
                f"the receiver did not answer within {self.timeout:g} s", permanent=False
            ) from exc
        except httpx2.InvalidURL as exc:
            raise DeliveryError(f"the webhook URL is not usable: {exc}", permanent=True) from exc
        except httpx2.HTTPError as exc:
            # The URL is left out: a webhook URL's path often holds the receiver's secret.
            raise DeliveryError(
                f"could not reach the receiver: {exc or type(exc).__name__}", permanent=False
            ) from exc
        status = response.status_code
        if 200 <= status < 300:
            return
        answer = f"the receiver answered {status} {response.reason_phrase}".rstrip()
        if 300 <= status < 400:
            answer += " (redirects are not followed)"
        raise DeliveryError(answer, permanent=not (status in _RETRIED or status >= 500))

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
