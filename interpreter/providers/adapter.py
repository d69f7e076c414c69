"""What the OpenAI and Anthropic adapters share: the key, the timeout, the call, the result.

An adapter serves one configured logical model (:class:`~.config.ModelConfig`). Its
``complete`` builds the API's request body (:meth:`HttpAdapter.body`), POSTs it with the
smaller of the model's ``timeout`` and what is left of the step's deadline, maps an
error answer to its class (:mod:`.failures`) and reads a success (:meth:`HttpAdapter.read`).

The API key lives only in an :class:`ApiKey` (its ``repr`` and ``str`` are redacted) and
in the request headers; it is never part of an error message, a log record, a recording
or the adapter's ``repr``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from sealflow.core.errors import StepError
from sealflow.providers.base import ModelRequest, ModelResult, ToolCall, remaining_seconds
from sealflow.providers.config import ModelConfig
from sealflow.providers.failures import error_for_answer, scrub
from sealflow.providers.http import HttpAnswer, post_json
from sealflow.providers.prices import cost_usd, price_for


class ApiKey:
    """A secret value that does not show itself: ``repr`` and ``str`` are ``ApiKey(***)``."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None):
        self._value = value or None

    def reveal(self) -> str | None:
        return self._value

    def __bool__(self) -> bool:
        return self._value is not None

    def __repr__(self) -> str:
        return "ApiKey(***)" if self._value else "ApiKey(none)"

    __str__ = __repr__

    def __reduce__(self) -> NoReturn:  # never pickled with its value
        raise TypeError("an ApiKey cannot be pickled")


class HttpAdapter:
    """Base of the HTTP adapters; subclasses set ``provider``, ``path`` and the three hooks."""

    provider = ""
    path = ""
    #: the ``usage`` keys of the input and output token counts
    usage_keys = ("input_tokens", "output_tokens")

    def __init__(self, config: ModelConfig, api_key: str | None = None):
        if config.provider != self.provider:
            raise ValueError(f"{type(self).__name__} serves provider {self.provider!r}, not {config.provider!r}")
        self.config = config
        self.name = f"{self.provider}:{config.name}"
        self._key = ApiKey(api_key)
        self.price = price_for(config)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(model={self.config.name!r}, provider_model={self.config.model!r}, "
                f"endpoint={self.config.endpoint!r}, api_key={self._key!r})")

    # -- hooks ------------------------------------------------------------------------------------

    def headers(self, key: str | None) -> dict[str, str]:
        raise NotImplementedError

    def body(self, request: ModelRequest) -> dict[str, Any]:
        raise NotImplementedError

    def read(self, request: ModelRequest, data: Mapping[str, Any]) -> ModelResult:
        raise NotImplementedError

    # -- the call ---------------------------------------------------------------------------------

    def timeout(self, request: ModelRequest) -> float:
        left = remaining_seconds(request)
        return self.config.timeout if left is None else min(self.config.timeout, left)

    def url(self) -> str:
        return self.config.endpoint + self.path

    def complete(self, request: ModelRequest) -> ModelResult:
        answer = self.send(self.body(request), self.timeout(request))
        data = self.answer_json(answer)
        try:
            return self.read(request, data)
        except StepError as exc:
            # an answer that is refused (cut off, not JSON, a refusal) was still paid for: the error carries
            # its usage, for the step to charge
            used_in, used_out = tokens(data.get("usage"), *self.usage_keys)
            exc.tokens = used_in + used_out  # type: ignore[attr-defined]
            exc.cost_usd = cost_usd(self.price, used_in, used_out)  # type: ignore[attr-defined]
            raise

    def send(self, body: dict[str, Any], timeout: float) -> HttpAnswer:
        key = self._key.reveal()
        try:
            answer = post_json(self.url(), body, self.headers(key), timeout)
        except StepError as exc:
            raise StepError(exc.error_class, scrub(exc.message, key), retry_after=exc.retry_after) from None
        if not 200 <= answer.status < 300:
            raise error_for_answer(answer, provider=self.provider, model=self.config.name, secret=key)
        return answer

    def answer_json(self, answer: HttpAnswer) -> Mapping[str, Any]:
        data = answer.json()
        if not isinstance(data, dict):
            raise StepError("unavailable", f"{self.provider} model {self.config.name!r} answered HTTP "
                                           f"{answer.status} with a body that is not a JSON object (a proxy error "
                                           "page?)")
        return data

    def result(self, request: ModelRequest, *, output: Any, text: str, input_tokens: int, output_tokens: int,
               model: str, tool_call: ToolCall | None = None) -> ModelResult:
        return ModelResult(output=output, text=text, input_tokens=input_tokens, output_tokens=output_tokens,
                           cost_usd=cost_usd(self.price, input_tokens, output_tokens),
                           model=model or self.config.model, tool_call=tool_call)

    def malformed(self, what: str) -> StepError:
        return StepError("unavailable", f"{self.provider} model {self.config.name!r} answered a malformed "
                                        f"response: {what}")


def tokens(usage: Any, input_key: str, output_key: str) -> tuple[int, int]:
    """``(input, output)`` token counts from a ``usage`` map (0 when absent)."""
    if not isinstance(usage, dict):
        return 0, 0

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    return count(input_key), count(output_key)
