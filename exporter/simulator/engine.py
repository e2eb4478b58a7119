"""A small discrete-time model of vLLM's V1 engine.

What is modelled, and why each piece exists:

* **Frontend (API server).** One process tokenises requests one at a time (chat template +
  tokenizer) and processes outputs (detokenise, stream). Its CPU work competes with the
  engine core for the cores the deployment has (``cpu_share``); TTFT starts at frontend
  arrival, so slow tokenisation shows up as TTFT that is neither queue nor prefill.
* **Scheduler** (one engine step at a time): a per-step token budget
  (``max_num_batched_tokens``), at most ``max_num_seqs`` running requests, decode first
  (every running decode gets its one token), then running chunked prefills, then waiting
  requests in FCFS order with head-of-line blocking; no new admissions in a step that
  preempted. A waiting request for a LoRA adapter that has no slot (``max_loras`` adapters
  already run) is skipped, not blocking: vLLM counts it as waiting ``deferred``, not for capacity.
* **KV cache**: ``num_gpu_blocks`` blocks of ``block_size`` tokens (block 0 is vLLM's null
  block). A prefix cache maps block hashes (a hash chain over the prompt's content) to
  blocks; freed blocks keep their hash and go to the tail of an LRU free queue, allocation
  takes from the head and evicts what it takes. Cache hits are whole blocks, capped at
  ``num_tokens - 1``. When a running request needs a block and none is free, the most
  recently admitted running request is preempted (recompute: its blocks are freed and it
  re-prefills later, possibly hitting its own still-cached blocks).
* **Step time**: roofline per step (GEMM FLOPs vs HBM bytes for weights + KV reads), a fixed
  GPU overhead, TP all-reduces (two per layer, latency + ring bandwidth), and engine-core
  CPU time per step divided by the CPU share.

Every decode request advances the same number of tokens per step (the budget is never below
``max_num_seqs`` times the tokens a decode schedules), so decodes are tracked in lock step on a
decode clock (tokens every decode has advanced so far) through heaps of the clock values at which
something happens to them (needs a new block, finishes). That keeps a step O(events) instead
of O(batch), which is what makes ten simulated minutes take a fraction of a second.

* **Speculative decoding** (``num_speculative_tokens`` > 0, vLLM's ``--speculative-config``): each
  decode schedules 1 + k tokens (its last token and k draft tokens, all verified in one forward
  pass, all within the token budget and KV slots) and emits 1 + the accepted drafts: draft position
  i is accepted when it and every position before it are, each with probability
  ``spec_acceptance``. One draw per step for the whole batch (lock step), so the counters vLLM
  exports (drafts, draft tokens, accepted tokens, accepted per position) and the inter-token
  latency, one observation per output event however many tokens it carries, follow vLLM's
  populations; per request, only the mean is right.

* **KV transfer and offload** (vLLM's ``--kv-transfer-config``, ``--kv-offloading-size``): on the decode
  instance of a disaggregated pair (``kv_role`` kv_consumer) every prompt's KV comes from a prefill
  instance: at admission the request gets its blocks and waits, *deferred*, while the connector loads
  them over one link (NIXL: ``kv_transfer_bandwidth`` shared in arrival order, plus a fixed latency per
  load); when the load is done it is scheduled with the prompt computed but its last token (vLLM stamps it
  SCHEDULED only then, so the wait is in its queue time). A load fails with ``kv_transfer_failure_rate``:
  the request then errors (``kv_load_failure_policy`` fail, vLLM's default) or prefills locally
  (recompute). With an offload tier (``kv_offload_blocks``) every computed block is also stored in a CPU
  LRU of that many blocks; a lookup continues there after the GPU prefix cache, and the blocks it finds
  are loaded over PCIe the same way (deferred), preempted requests included: a miss costs a copy.

The model only has a simulated clock (``Engine.now``, seconds since start); it never sleeps
and is deterministic for a given seed.

What a user of the model may replace, each through a protocol (the advisor's calibrated engine,
``exporter/advisor/model.py``, replaces all three):

* ``StepCostModel``: what one step costs (default ``RooflineCost``, the roofline above);
* ``ArrivalSource``: which requests reach the API server when (default ``SpecStream`` over the
  workload's generated requests; a closed loop of clients sends the next when one finishes);
* ``EngineObserver``: told of each first admission, token gap and finish (default: none).

The KV cache's block pool is its own module (``blockpool``).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import OrderedDict, deque

from exporter.simulator.blockpool import BlockPool
from exporter.simulator.deployment import (
    H100_SXM,
    H100_TP_ACROSS_NODES_TCP,
    LLAMA_3_1_8B,
    CostModel,
    EngineConfig,
    GpuSpec,
    ModelSpec,
)
from exporter.simulator.kvcache import KvCache
from exporter.simulator.replaceable import (
    ArrivalSource,
    EngineObserver,
    RooflineCost,
    SpecStream,
    StepCostModel,
    StepTime,
)
from exporter.simulator.request import _DECODE, _DONE, _PREFILL, Request
from exporter.simulator.residency import BlockResidency
from exporter.simulator.stats import FINISHED_REASONS, EngineStats, GpuBin, Histogram
from exporter.simulator.workload import Workload, generate

# The model's parts, importable from here as before the split.
__all__ = ["FINISHED_REASONS", "H100_SXM", "H100_TP_ACROSS_NODES_TCP", "LLAMA_3_1_8B", "ArrivalSource", "CostModel",
           "Engine", "EngineConfig", "EngineObserver", "EngineStats", "GpuBin", "GpuSpec", "Histogram", "ModelSpec",
           "Request", "RooflineCost", "SpecStream", "StepCostModel", "StepTime"]


class Engine(KvCache):
    """The simulated deployment: frontend + engine core + GPU(s), advanced by ``advance_to``.

    ``cost``, ``arrivals`` and ``observer`` replace the roofline step cost, the workload's generated
    requests and the absent observer (the protocols of ``replaceable``); ``workload`` still gives the client timeout.
    """

    def __init__(self, config: EngineConfig, workload: Workload, seed: int = 0, *,
                 cost: StepCostModel | None = None, arrivals: ArrivalSource | None = None,
                 observer: EngineObserver | None = None) -> None:
        self.cfg = config
        self.stats = EngineStats(config)
        self.now = 0.0
        self.step_index = 0
        self.num_gpu_blocks = config.num_gpu_blocks
        self._bs = config.block_size
        self._own_cost = cost is None  # the roofline of the config: rebuilt when it changes (reconfigure)
        self.cost: StepCostModel = RooflineCost(config) if cost is None else cost
        self.arrivals: ArrivalSource = (SpecStream(generate(workload, seed, config.max_model_len))
                                        if arrivals is None else arrivals)
        self.observer = observer
        self._client_timeout = workload.client_timeout_s
        # frontend
        self._frontend_free = 0.0
        self._pending: deque[Request] = deque()  # tokenised, ready at t_engine (non-decreasing)
        # scheduler state
        self.waiting: deque[Request] = deque()
        self.running: dict[int, Request] = {}  # admission order; popitem() = lowest priority
        self._prefilling: dict[int, Request] = {}
        self._n_decode = 0
        # Decode clock: tokens every running decode has advanced so far (one per step without speculation).
        self._clock = 0
        self._ctx_base = 0  # sum over decode requests of (t0 - c0); context = base + n * clock
        self._blocks_due: list[tuple[int, int, int, Request]] = []  # (clock, order, epoch, r): grow KV
        self._finish_due: list[tuple[int, int, int, Request]] = []  # (clock, order, epoch, r): last token
        self._spec_k = config.num_speculative_tokens
        self._spec_rng = random.Random(f"spec-{seed}")
        self._order = 0
        self._preempted_this_step = False
        self._pool = BlockPool(self.num_gpu_blocks, self._bs)  # KV cache: block 0 is the null block
        if config.kv_cache_metrics_sample:
            self._pool.residency = BlockResidency(config.kv_cache_metrics_sample, lambda: self.now, self.stats, seed)
        # KV loads under way (done time, order, request), the links they share, requests whose load is done
        self._loading: list[tuple[float, int, Request]] = []
        self._link_free = {"nixl": 0.0, "offload": 0.0}
        self._kv_rng = random.Random(f"kv-{seed}")
        self._cpu_tier: OrderedDict[tuple[int, int], None] | None = (
            OrderedDict() if config.kv_offload_blocks > 0 else None)

    # ----------------------------------------------------------------- public read-outs

    @property
    def kv_cache_usage(self) -> float:
        """Held blocks / usable blocks; evictable cached blocks count as free (vLLM's rule)."""
        return self._pool.usage

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + len(self._loading)

    @property
    def sleep_level(self) -> int:
        """0 while awake, else the level the engine sleeps at (vLLM's engine_sleep_state one-hot)."""
        asleep = self.cfg.sleep_at is not None and self.now >= self.cfg.sleep_at
        return self.cfg.sleep_level if asleep else 0

    @property
    def num_waiting_deferred(self) -> int:
        """Waiting requests whose LoRA adapter has no slot while ``max_loras`` adapters run, and those whose KV
        is loading or loaded but not yet scheduled (vLLM defers them from their admission until they run)."""
        loaded = self.num_kv_loaded_waiting
        running = {r.spec.lora for r in self.running.values() if r.spec.lora}
        if len(running) < self.cfg.max_loras:
            return len(self._loading) + loaded
        return len(self._loading) + loaded + sum(1 for r in self.waiting if r.spec.lora and r.spec.lora not in running)

    @property
    def kv_offload_usage(self) -> float:
        """Share of the CPU offload tier holding blocks (0 without one)."""
        tier = self._cpu_tier
        return len(tier) / self.cfg.kv_offload_blocks if tier is not None else 0.0

    @property
    def num_kv_loading(self) -> int:
        """Requests whose KV load is under way (vLLM's fetch stage in_progress)."""
        return len(self._loading)

    @property
    def num_kv_loaded_waiting(self) -> int:
        """Requests whose KV load is done, not yet scheduled (fetch stage completed_waiting)."""
        if not self.cfg.kv_consumer:
            return 0
        return sum(1 for r in self.waiting if r.blocks)  # only a loaded request waits holding blocks

    def gpu_window(self, seconds: int = 1) -> GpuBin:
        """GPU activity over the last ``seconds`` complete simulated seconds (DCGM sampling)."""
        end = int(self.now)
        start = end - seconds
        out = GpuBin(second=start)
        for b in reversed(self.stats.gpu_bins):
            if b.second < start:
                break
            if b.second < end:
                out.busy_s += b.busy_s
                out.tensor_s += b.tensor_s
                out.dram_s += b.dram_s
                out.comm_bytes += b.comm_bytes
        return out

    def reconfigure(self, config: EngineConfig) -> None:
        """Change the deployment's running conditions mid-run (a neighbour takes the CPU, a slower
        kernel path): CPU share, frontend cost and the cost model. The KV geometry stays as started."""
        if config.num_gpu_blocks != self.num_gpu_blocks or config.block_size != self.cfg.block_size:
            raise ValueError("reconfigure cannot change the KV cache's geometry")
        self.cfg = config
        if self._own_cost:
            self.cost = RooflineCost(config)

    # ----------------------------------------------------------------- main loop

    def advance_to(self, t: float) -> None:
        """Run the deployment until the simulated clock reaches ``t`` (a step that is under
        way at ``t`` completes, so the clock may end slightly past it)."""
        while self.now < t:
            if self.cfg.sleep_at is not None and self.now >= self.cfg.sleep_at:
                self.now = t  # asleep: vLLM's engine core steps no more until /wake_up
                break
            self._pull_arrivals(self.now)
            pending = self._pending
            while pending and pending[0].t_engine <= self.now:
                # vLLM's engine core takes new requests between steps and stamps them QUEUED then:
                # the wait for the step under way is TTFT but not queue time.
                r = pending.popleft()
                r.t_queued = self.now
                self.waiting.append(r)
            self._drop_timed_out()
            self._complete_loads()
            if self.running or self.waiting:
                self._step()
                continue
            # Idle GPU: jump to the next thing that can happen.
            if pending:
                nxt = pending[0].t_engine
            else:
                arrival = self.arrivals.next_arrival()
                nxt = arrival if arrival is not None else math.inf
            if self._loading:
                nxt = min(nxt, self._loading[0][0])
            if self.cfg.sleep_at is not None:
                nxt = min(nxt, max(self.cfg.sleep_at, self.now))
            if nxt >= t:
                self.now = t
                break
            self.now = nxt

    # ----------------------------------------------------------------- frontend

    def _pull_arrivals(self, now: float) -> None:
        """Tokenise every request that has arrived at the API server by ``now`` (FIFO)."""
        costs, cfg = self.cfg.costs, self.cfg
        for spec in self.arrivals.arrived(now):
            work = (costs.tokenize_base_s + costs.tokenize_per_token_s * spec.prompt_len) * cfg.frontend_cost_scale
            start = max(spec.arrival, self._frontend_free)
            self._frontend_free = start + work / cfg.cpu_share
            self.stats.frontend_cpu_s += work
            self.stats.render_duration.observe(work / cfg.cpu_share)  # wall time: the loop runs at its share
            if self.stats.render_first_at is None:
                self.stats.render_first_at = self._frontend_free
            req = Request(spec, self._frontend_free)
            req.remote = cfg.kv_role == "kv_consumer"  # a decode instance: the proxy sent the prefill elsewhere
            self._pending.append(req)

    def _frontend_outputs(self, n_outputs: int) -> float:
        """Process one step's outputs in the API server; returns when clients see them.

        Output processing (detokenise, stream) shares the API server's single event loop with
        tokenisation, so a busy or CPU-starved frontend delays what the frontend clock
        measures (TTFT, e2e) while the engine-clock intervals (queue, prefill, decode,
        inference) stay as they were.
        """
        work = n_outputs * self.cfg.costs.output_per_token_s
        self._frontend_free = max(self._frontend_free, self.now) + work / self.cfg.cpu_share
        self.stats.frontend_cpu_s += work
        return self._frontend_free

    def _drop_timed_out(self) -> None:
        """Clients hang up on requests that waited too long; vLLM records them nowhere."""
        waiting, deadline = self.waiting, self.now - self._client_timeout
        while waiting and not waiting[0].admitted_once and waiting[0].spec.arrival <= deadline:
            waiting.popleft()
            self.stats.client_aborts += 1

    # ----------------------------------------------------------------- scheduling

    def _admit(self, r: Request, budget: int) -> int:
        """Schedule waiting ``r`` with up to ``budget`` tokens; 0 if KV has no room for it (for its first
        chunk, or its whole prompt with ``reserve_full_isl``), -1 if its KV is to be loaded first (it got its
        blocks and waits, deferred, for the load: no budget used)."""
        if r.blocks:
            return self._admit_loaded(r, budget)
        pool = self._pool
        free = pool.free
        if not free:
            return 0  # cheap reject: any admission needs at least one new block
        hits = self._lookup(r)
        evictable = pool.evictable(hits)
        # vLLM's scheduler_reserve_full_isl: without it a long prompt admitted on a leftover chunk of
        # budget preempts itself on its next chunk.
        if self.cfg.reserve_full_isl and -(-r.num_tokens // self._bs) - len(hits) + evictable > len(free):
            return 0
        cached_tokens = len(hits) * self._bs
        external, kind = self._external_tokens(r, hits)
        if external:
            return self._start_load(r, hits, external, kind)
        n = min(r.num_tokens - cached_tokens, budget)
        if not self._take_blocks(r, hits, cached_tokens + n):
            return 0
        r.computed = cached_tokens
        if not r.admitted_once:
            # Prefix-cache counters: tokens, first admission only (re-admissions excluded).
            r.admitted_once = True
            r.hits_first = cached_tokens
            r.t_sched = self.now
            self.stats.prefix_cache_queries += r.num_tokens
            self.stats.prefix_cache_hits += cached_tokens
            if self.observer is not None:
                self.observer.admitted(r, self.step_index)
            if self.cfg.kv_consumer:  # the connector is asked for what the GPU cache missed, and found none
                self.stats.external_prefix_queries += r.num_tokens - cached_tokens
        self._run(r)
        return n

    def _run(self, r: Request) -> None:
        """``r`` joins the running batch, prefilling, as the lowest-priority request."""
        self._order += 1
        r.order = self._order
        r.phase = _PREFILL
        self.running[r.rid] = r
        self._prefilling[r.rid] = r

    def _admit_loaded(self, r: Request, budget: int) -> int:
        """Schedule ``r``, whose blocks it holds since its KV load: the rest of its prompt (its last token)."""
        n = min(r.num_tokens - r.computed, budget)
        need = -(-(r.computed + n) // self._bs) - len(r.blocks)
        if need > len(self._pool.free):
            return 0
        if need > 0:
            r.blocks.extend(self._pool.allocate(need))
        if r.t_sched < 0:
            r.t_sched = self.now  # vLLM stamps SCHEDULED now: the load's wait is queue time
        self._run(r)
        return n

    def _enter_decode(self, r: Request) -> None:
        """``r`` emitted a token at the end of this step (the clock already advanced); it decodes next step."""
        del self._prefilling[r.rid]
        r.phase = _DECODE
        r.c0 = self._clock
        r.t0 = r.num_tokens
        r.g0 = r.generated
        self._n_decode += 1
        self._ctx_base += r.t0 - r.c0
        finish = r.c0 + (r.out_len - r.g0)  # the clock at which its last token is out
        heapq.heappush(self._finish_due, (finish, r.order, r.epoch, r))
        self._push_block_due(r, finish)

    def _push_block_due(self, r: Request, finish: int) -> None:
        """When ``r`` next needs a block: a decode step at num_tokens T computes position T-1 and its k
        draft positions, so it needs ceil((T + k) / bs) blocks."""
        due = self._bs * len(r.blocks) - r.t0 + r.c0 - self._spec_k + 1
        due = max(due, self._clock)
        if due < finish:
            heapq.heappush(self._blocks_due, (due, r.order, r.epoch, r))

    def _grow_decode(self, r: Request) -> None:
        tokens = r.t0 + (self._clock - r.c0)
        if not self._ensure_blocks(r, tokens + self._spec_k):
            return
        self._register(r, tokens - 1)
        self._push_block_due(r, r.c0 + (r.out_len - r.g0))

    def _accepted(self) -> int:
        """Draft tokens accepted this step: the leading run of acceptances among the k drafts."""
        k, p, rng = self._spec_k, self.cfg.spec_acceptance, self._spec_rng
        accepted = 0
        while accepted < k and rng.random() < p:
            accepted += 1
        return accepted

    def _step(self) -> None:
        cfg = self.cfg
        self.step_index += 1
        self._preempted_this_step = False
        blocks_due, clock = self._blocks_due, self._clock

        # 1. Decodes first: each running decode needs one token (1 + k with speculation), some a new block.
        while blocks_due and blocks_due[0][0] <= clock:
            _, _, epoch, r = heapq.heappop(blocks_due)
            if r.epoch == epoch and r.phase == _DECODE:
                self._grow_decode(r)
        budget = cfg.max_num_batched_tokens - self._n_decode * (1 + self._spec_k)

        # 2. Running chunked prefills, in admission order.
        chunks: list[tuple[Request, int, int]] = []
        if self._prefilling and budget > 0:
            for r in list(self._prefilling.values()):
                if budget <= 0:
                    break
                if r.phase != _PREFILL:  # preempted by an earlier request in this loop
                    continue
                n = min(r.target - r.computed, budget)
                if not self._ensure_blocks(r, r.computed + n):
                    continue
                chunks.append((r, r.computed, n))
                r.computed += n
                budget -= n

        # 3. Waiting requests, FCFS with head-of-line blocking; none after a preemption. A request
        # whose LoRA adapter finds no free slot is set aside (vLLM's skipped waiting requests).
        if not self._preempted_this_step:
            waiting, running, max_seqs = self.waiting, self.running, cfg.max_num_seqs
            loras: set[int] | None = None  # adapters in the batch, built only when a LoRA request waits
            skipped: list[Request] = []
            while budget > 0 and waiting and len(running) < max_seqs:
                r = waiting[0]
                lora = r.spec.lora
                if lora:
                    if loras is None:
                        loras = {x.spec.lora for x in running.values() if x.spec.lora}
                    if lora not in loras and len(loras) >= cfg.max_loras:
                        skipped.append(waiting.popleft())
                        continue
                n = self._admit(r, budget)
                if n == 0:
                    break
                waiting.popleft()
                if n < 0:
                    continue  # its KV loads first: it waits deferred, holding its blocks
                if lora and loras is not None:
                    loras.add(lora)
                chunks.append((r, r.computed, n))
                r.computed += n
                budget -= n
            if skipped:
                waiting.extendleft(reversed(skipped))  # back at the head, in their order

        # 4. How long the step takes.
        n_decode = self._n_decode
        dt, gpu_s, tensor_s, dram_s, comm_s, comm_bytes, flops, read_bytes = self.cost.step_time(
            self.now, n_decode, self._ctx_base + n_decode * self._clock, chunks)
        t_start = self.now
        self.now = t_end = t_start + dt
        st = self.stats
        st.estimated_flops += flops
        st.estimated_read_bytes += read_bytes
        st.steps += 1
        st.step_time_s += dt
        st.comm_time_s += comm_s
        st.comm_bytes += comm_bytes
        st.gpu_busy_s += gpu_s
        bins = st.gpu_bins
        sec = int(t_start)
        if not bins or bins[-1].second != sec:
            bins.append(GpuBin(second=sec))
        b = bins[-1]
        b.busy_s += gpu_s
        b.tensor_s += tensor_s
        b.dram_s += dram_s
        b.comm_bytes += comm_bytes
        if self.cfg.enable_lora:
            # vLLM's frontend reports, after every step, the adapters of the requests it has seen run (a
            # request held back for a slot is not known as waiting until its first output brings its QUEUED
            # event), in 0.32 under both labels: one series per set of names, valued at its last update.
            names = sorted({r.spec.lora for r in self.running.values() if r.spec.lora})
            st.lora_updates[",".join(f"adapter-{n}" for n in names)] = t_end

        # 5. Outputs at the end of the step. The API server ran concurrently with the step:
        # requests that arrived meanwhile were tokenised as they came, before it sees this
        # step's outputs, which clients receive at `seen`.
        self._pull_arrivals(t_end)
        completing = sum(1 for r, _, _ in chunks if r.phase == _PREFILL and r.computed >= r.target)
        outputs = n_decode + completing
        seen = self._frontend_outputs(outputs) if outputs else t_end
        prompt_computed = 0
        advance = 1
        if n_decode:
            # Every decode emitted one output (1 + accepted drafts tokens); its previous output was at
            # the previous step's end, which is this step's start (the engine never idles while decodes run).
            st.inter_token_latency.observe(dt, n_decode)
            if self.observer is not None:
                self.observer.token_gap(t_end, dt, n_decode)
            if self._spec_k:
                accepted = self._accepted()
                advance += accepted
                st.spec_drafts += n_decode
                st.spec_draft_tokens += n_decode * self._spec_k
                st.spec_accepted_tokens += n_decode * accepted
                for pos in range(accepted):
                    st.spec_accepted_per_pos[pos] += n_decode
        self._clock = clock = clock + advance
        generated = n_decode * advance
        for r, _, _ in chunks:
            if r.phase != _PREFILL:
                continue
            if r.computed < r.target:
                self._register(r, r.computed)
                continue
            self._register(r, r.computed)
            r.num_tokens += 1
            r.generated += 1
            if r.t_first < 0:
                r.t_first = t_end
                st.time_to_first_token.observe(seen - r.spec.arrival)
                st.prompt_tokens += r.prompt_len
                st.prompt_tokens_local_cache_hit += r.hits_first
                st.prompt_tokens_external += r.ext_first
                st.prompt_tokens_local_compute += r.prompt_len - r.hits_first - r.ext_first
                prompt_computed += r.prompt_len - r.hits_first - r.ext_first
            else:
                # First output after a recompute: one long gap in the stream.
                st.inter_token_latency.observe(t_end - r.t_last_out)
                if self.observer is not None:
                    self.observer.token_gap(t_end, t_end - r.t_last_out, 1)
            r.t_last_out = t_end
            generated += 1
            if r.generated >= r.out_len:
                del self._prefilling[r.rid]
                del self.running[r.rid]
                self._finish(r, seen)
            else:
                self._enter_decode(r)
        finish_due = self._finish_due
        while finish_due and finish_due[0][0] <= clock:
            due, _, epoch, r = heapq.heappop(finish_due)
            if r.epoch == epoch and r.phase == _DECODE:
                generated -= clock - due  # a request stops at its last token, drafts beyond it are dropped
                r.num_tokens = r.t0 + (due - r.c0)
                r.generated = r.g0 + (due - r.c0)
                r.t_last_out = t_end
                self._n_decode -= 1
                self._ctx_base -= r.t0 - r.c0
                del self.running[r.rid]
                self._finish(r, seen)
        st.generation_tokens += generated
        if outputs:
            st.iteration_tokens.observe(prompt_computed + generated)

    def _finish(self, r: Request, seen: float) -> None:
        """``r`` produced its last token; its client saw it at ``seen`` (frontend clock)."""
        st = self.stats
        r.phase = _DONE
        self._free_blocks(r)
        spec = r.spec
        e2e = seen - spec.arrival
        st.request_success[spec.finished_reason] += 1
        st.e2e_request_latency.observe(e2e)
        st.request_queue_time.observe(r.t_sched - r.t_queued)
        st.request_prefill_time.observe(r.t_first - r.t_sched)
        st.request_decode_time.observe(r.t_last_out - r.t_first)
        st.request_inference_time.observe(r.t_last_out - r.t_sched)
        tpot = (r.t_last_out - r.t_first) / (r.generated - 1) if r.generated > 1 else 0.0
        st.request_time_per_output_token.observe(tpot)
        st.request_prompt_tokens.observe(r.prompt_len)
        st.request_generation_tokens.observe(r.generated)
        st.request_max_num_generation_tokens.observe(r.generated)
        st.request_params_n.observe(1)
        if spec.max_tokens is not None:
            st.request_params_max_tokens.observe(spec.max_tokens)
        st.request_prefill_kv_computed_tokens.observe(r.prompt_len - r.hits_first)
        st.request_num_preemptions.observe(r.preemptions)
        # The HTTP layer sees the whole stream plus a little routing overhead.
        if st.http_first_request_at is None:
            st.http_first_request_at = seen
        st.http_requests += 1
        st.http_request_size_sum += 4.0 * r.prompt_len + 310.0
        st.http_duration.observe(e2e + 0.0015)
        st.http_duration_highr.observe(e2e + 0.0015)
        if self.observer is not None:
            self.observer.finished(r, seen)
        self.arrivals.finished(spec, seen)
