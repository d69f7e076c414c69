"""Shared values of the model adapter tests (importable: ``from model_helpers import KEY``)."""

#: the API key the fake server expects; the tests check it never leaks
KEY = "sk-test-0123456789abcdefSECRET"
