"""Property-based fuzzing of the server's OpenAPI schema (schemathesis): generated requests to
every endpoint never get a 5xx, every response matches the schema the server publishes, and
requests the schema forbids are refused (it found `"beam_size": false` accepted as 0). Not
checked: that every schema-valid request succeeds, since the server's limits (n_best <= beam
size, its beam and length caps, the model's positions) are answered with 413/422 that the
schema does not describe."""

import pytest

schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("fastapi")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import positive_data_acceptance  # noqa: E402

from serving_helpers import random_translator  # noqa: E402
from transformer_mt.config import ServeConfig  # noqa: E402
from transformer_mt.serving.app import create_app  # noqa: E402

EXAMPLES = 300  # per operation; the two POST endpoints alone make 600 requests
CALLS = {"count": 0}


@pytest.fixture(scope="module")
def api_schema(corpus_vocab):
    translator = random_translator(corpus_vocab, max_length=24)
    # limits small enough that the worst generated request decodes in milliseconds
    serve = ServeConfig(max_wait_ms=0.0, max_beam=4, max_offset=16,
                        max_sentences=4, max_chars=200)
    app = create_app(translator, serve, languages=("en", "de"))
    return schemathesis.openapi.from_asgi("/openapi.json", app)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_no_server_error_and_every_response_matches_the_schema(case):
    CALLS["count"] += 1
    case.call_and_validate(excluded_checks=[positive_data_acceptance])


def test_the_fuzzer_sent_at_least_500_requests():
    assert CALLS["count"] >= 500, CALLS
