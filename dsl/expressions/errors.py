"""The two errors of the expression language: one for the text, one for evaluation."""

from __future__ import annotations

from sealflow.dsl.errors import DslError


class ExpressionError(DslError):
    """A located problem in an expression's text (``offset``: 0-based character)."""

    def __init__(self, code: str, message: str, offset: int = 0, hint: str | None = None,
                 text: str | None = None):
        super().__init__(code, message, offset, hint, text)
        self.code, self.message, self.offset, self.hint, self.text = code, message, offset, hint, text

    def __str__(self) -> str:
        return f"{self.code}: {self.message} (at character {self.offset + 1})"

    def shifted(self, delta: int, text: str | None = None) -> ExpressionError:
        """The same error ``delta`` characters further on, inside ``text``."""
        return ExpressionError(self.code, self.message, self.offset + delta, self.hint,
                               self.text if text is None else text)

    def line_column(self) -> tuple[int, int]:
        """1-based line and column of the offset in ``text``."""
        before = (self.text or "")[: self.offset]
        return before.count("\n") + 1, self.offset - (before.rfind("\n") + 1) + 1

    def caret(self) -> str:
        """The offending line of the text with a caret under the offending character."""
        text = self.text or ""
        start = text.rfind("\n", 0, self.offset) + 1
        end = text.find("\n", self.offset)
        return f"{text[start:end if end >= 0 else len(text)]}\n{' ' * (self.offset - start)}^"


class EvaluationError(DslError):
    """A runtime problem evaluating an expression (type mismatch, bound exceeded, bad argument)."""

    @property
    def message(self) -> str:
        return str(self)
