"""``vllm:iteration_tokens_total`` as vLLM 0.32 counts it: one observation per engine output batch (a step with
no output is not observed), of the prompt tokens computed by the requests whose prefill completed in it (their
whole computed prompt, prefix-cache hits excluded, however many steps the budget spread it over) plus the tokens
generated. The step witness (exporter/signals/witnesses.py) reads exactly these two properties."""

from __future__ import annotations

from exporter.simulator import SCENARIOS
from exporter.simulator.engine import Engine


def _run(name: str, seconds: float = 120.0) -> Engine:
    engine = SCENARIOS[name].build()
    assert isinstance(engine, Engine)
    engine.advance_to(seconds)
    return engine


def test_every_computed_prompt_and_generated_token_is_counted_once() -> None:
    for name in ("small-token-budget", "healthy"):
        st = _run(name).stats
        hist = st.iteration_tokens
        assert hist.sum == st.prompt_tokens_local_compute + st.generation_tokens, name
        assert 0 < hist.count <= st.steps, name
    healthy = _run("healthy").stats
    assert healthy.prompt_tokens_local_cache_hit > 0  # hits exist, and the identity above left them out


def test_a_chunked_prefill_lands_whole_in_the_step_that_completes_it() -> None:
    """Budget 256, ~4000-token prompts: no step computes more than 256 tokens, yet observations above it are
    the prompts completed (one per first token at most); every other observation is within the budget."""
    engine = _run("small-token-budget")
    st, budget = engine.stats, engine.cfg.max_num_batched_tokens
    hist = st.iteration_tokens
    above = sum(n for bound, n in zip((*hist.bounds, float("inf")), hist.counts) if bound > budget)
    first_tokens = st.time_to_first_token.count
    assert first_tokens > 0 and 0.8 * first_tokens <= above <= first_tokens
