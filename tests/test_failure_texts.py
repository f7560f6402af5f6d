"""A failed run's fix is said in the model's own terms (issue 25, item 3): an embedded local
model's names its llama.cpp server, its weights and `make local-model`, never a base_url, a
key or the network; a hosted model keeps its endpoint's texts."""

from __future__ import annotations

import pytest
import yaml
from test_paid_study import env, llm, registry, study_file  # noqa: F401 (env: a fixture)

from adakit.llm.models import ModelSpec
from adakit.record import read_run
from adakit.study.launch import failure_summary, launch
from adakit.study.retry import Failure, fix_for
from adakit.study.spec import load_study

LOCAL = ModelSpec(name="tiny-local", kind="local", model_id="tiny", weights="smollm2-135m",
                  constrain="grammar")
HOSTED = ModelSpec(name="hosted", kind="llm", base_url="https://api.example.org/v1", model_id="h",
                   api_key_env="HOSTED_KEY")
#: what a hosted model's text may say that a local model's never may
ENDPOINT_WORDS = ("base_url", "network", "API key", "HOSTED_KEY", "max_concurrency", "429")


@pytest.mark.parametrize("kind", ["unreachable", "gave_up", "local", "http", "missing_key", "auth"])
def test_a_local_models_fix_names_its_server_and_weights(kind):
    text = fix_for(kind, LOCAL)
    assert "tiny-local" in text and "llama.cpp server" in text, text
    assert not any(word in text for word in ENDPOINT_WORDS), text
    if kind in ("unreachable", "gave_up", "local"):
        assert "`make local-model`" in text and "smollm2-135m" in text, text
    gguf = ModelSpec(name="own-gguf", kind="local", model_id="x", gguf="/models/x.gguf")
    assert "/models/x.gguf" in fix_for("local", gguf)


def test_a_hosted_models_fix_keeps_its_endpoint_texts():
    assert fix_for("unreachable", HOSTED) == ("nothing answers at https://api.example.org/v1: check "
                                              "base_url of hosted and the network")
    assert fix_for("missing_key", HOSTED) == "set HOSTED_KEY"
    assert "lower max_concurrency for hosted" in fix_for("gave_up", HOSTED)
    assert "llama.cpp" not in fix_for("unreachable", HOSTED)


def test_the_failure_summary_words_each_model_in_its_own_terms(tmp_path, monkeypatch):
    models = {"tiny-local": {"kind": "local", "model_id": "tiny", "weights": "smollm2-135m"},
              "hosted": {"kind": "llm", "base_url": "http://127.0.0.1:9/v1", "model_id": "h"}}
    (tmp_path / "models.yaml").write_text(yaml.safe_dump({"models": models}))
    monkeypatch.setenv("ADAKIT_MODELS", str(tmp_path / "models.yaml"))
    failed = [Failure("a__flask__t__natural__r0", "tiny-local", "unreachable", True, "..."),
              Failure("b__flask__t__natural__r0", "hosted", "unreachable", True, "...")]
    lines = failure_summary(failed, "s.yaml").splitlines()
    local = next(line for line in lines if line.startswith("  tiny-local"))
    hosted = next(line for line in lines if line.startswith("  hosted"))
    assert "local llama.cpp server for tiny-local did not answer" in local and "network" not in local
    assert "check base_url of hosted and the network" in hosted


def test_a_local_run_that_cannot_be_served_is_told_what_to_check(env, monkeypatch):  # noqa: F811
    gguf = "/absent/adakit-test/model.gguf"  # outside the host folders the record guard refuses
    registry(env, monkeypatch, **{"local-gone": {"kind": "local", "model_id": "gone", "gguf": gguf,
                                                 "constrain": "grammar"},
                                  "fake-ok": llm("http://127.0.0.1:9/v1")})
    path = study_file(env, [{"models": ["local-gone"], "worlds": ["flask"], "tasks": ["risk_review"],
                             "conditions": ["natural"]}])
    summary = launch(load_study(path), preflight_first=False, progress=False)  # past preflight
    [failure] = summary.attrs["failed"]
    end = read_run(env / "runs" / f"{failure.run_id}.jsonl").end
    assert (end.failure, end.retryable) == ("local", True) and "no GGUF file" in end.error
    text = failure_summary([failure], "study.yaml")
    assert f"check its GGUF file {gguf}" in text and "`make local-model`" in text, text
    assert not any(word in text for word in ENDPOINT_WORDS), text
