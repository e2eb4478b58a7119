"""Symptom classes A-G, their causes and the actions with trade-offs (docs/method.md).

Data only. The rule that decides each cause lives in ``exporter.diagnosis.rules`` under the
same id; alert rules, runbooks and the HTML page read titles and actions from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from exporter.catalog import metrics as vllm

LAYERS: tuple[str, ...] = ("request", "scheduler", "kv_cache", "gpu_compute", "cpu", "distributed")
VERDICTS: tuple[str, ...] = (*LAYERS, "none", "unknown")
# The verdict `unknown` has two meanings, which every output words apart: an objective is missed and
# no cause the catalog knows explains it (a cause of EFFECT_WITHOUT_CAUSE is active), or no diagnosis
# has been made (a window too short, a target that cannot be read).
UNKNOWN_UNEXPLAINED = "objective missed, no known cause explains it"
UNKNOWN_NOT_JUDGED = "no diagnosis yet"

# Which symptom classes' causes explain a miss (a burn) of each objective. One table for two readers:
# the page alert names the cause active on most replicas among these classes, and the diagnosis names
# the effect without a cause (EFFECT_WITHOUT_CAUSE) when none of their causes fires. C explains ITL too:
# the B rules leave a slow stream on a starved CPU to C1, as they leave one under preemption to D.
EXPLAINED_BY: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"ttft": ("A", "C", "D", "G"), "itl": ("B", "C", "D", "G"), "availability": ("D",)})
# Per judged objective, the cause that names its miss while no explaining cause fires: layer `unknown`.
EFFECT_WITHOUT_CAUSE: Mapping[str, str] = MappingProxyType({"ttft": "A0", "itl": "B0"})

# Where an alert's runbook_url points: <base>/<alertname lowercased>.md. Change it when the docs are served
# elsewhere (a fork, an internal wiki mirror); the file names under docs/runbooks/ stay the same. The
# generated alert rules and the HTML page both link through ``runbook_url``.
RUNBOOK_BASE_URL = "https://github.com/vllm-diag/vllm-diag/blob/main/docs/runbooks"


def runbook_url(alert_name: str, base_url: str = RUNBOOK_BASE_URL) -> str:
    return f"{base_url.rstrip('/')}/{alert_name.lower()}.md"


@dataclass(frozen=True, slots=True)
class Action:
    """One thing to do, what it gains and what it costs.

    ``knob`` and ``direction`` mark an action that turns a vLLM engine argument (snake case) one
    way: the diagnosis states its current value and a proposed one, and never advises both
    directions of one knob at once.
    """

    action: str
    gain: str
    cost: str
    knob: str | None = None
    direction: str | None = None  # "raise" or "lower"


@dataclass(frozen=True, slots=True)
class Symptom:
    id: str
    title: str
    severity: str  # alert severity: critical (pages), warning (tickets), info (context)
    alert: str  # alert name, CamelCase with the VLLM prefix


@dataclass(frozen=True, slots=True)
class Cause:
    id: str
    symptom: str
    layer: str
    title: str
    explanation: str
    actions: tuple[Action, ...]


SYMPTOMS: tuple[Symptom, ...] = (
    Symptom("A", "High TTFT, decode normal", "warning", "VLLMSlowFirstToken"),
    Symptom("B", "Poor inter-token latency (stuttering stream)", "warning", "VLLMStutteringStream"),
    Symptom("C", "Low throughput while the GPU idles", "warning", "VLLMIdleEngine"),
    Symptom("D", "Frequent preemption / recompute", "warning", "VLLMFrequentPreemption"),
    Symptom("E", "KV memory headroom at risk", "warning", "VLLMKVHeadroomRisk"),
    Symptom("F", "Prefix cache ineffective", "info", "VLLMPrefixCacheIneffective"),
    Symptom("G", "Multi-GPU overhead outweighs the memory gained", "warning", "VLLMParallelismOverhead"),
)

_RAISE_GMU = Action("raise gpu_memory_utilization", "more KV blocks, fewer preemptions, more concurrency",
                    "less headroom, fragile under bursts; other runtimes on the GPU may hit the ceiling",
                    "gpu_memory_utilization", "raise")
_LOWER_SEQS = Action("lower max_num_seqs", "fewer requests hold KV at once", "less concurrency; the GPU may idle",
                     "max_num_seqs", "lower")
_LOWER_BUDGET_KV = Action("lower max_num_batched_tokens", "less KV consumed per step", "throughput may drop",
                          "max_num_batched_tokens", "lower")
_RAISE_TP = Action("raise tensor_parallel_size", "weights spread out, frees KV space",
                   "all-reduce per layer, communication latency", "tensor_parallel_size", "raise")
# KV capacity without more GPUs: each a restart with a flag, none a knob the diagnosis sizes.
_FP8_KV = Action("store the KV cache in fp8 (--kv-cache-dtype fp8)", "about twice the KV blocks in the same memory",
                 "a small accuracy loss on some models; needs fp8 KV support in the GPU and attention backend "
                 "(Hopper, Ada, recent ROCm), and a calibrated checkpoint for the best accuracy")
_SHORTER_CONTEXT = Action("lower --max-model-len to the longest context the traffic needs",
                          "the KV cache holds more concurrent requests, and requests that could never fit are "
                          "refused at once instead of preempting others", "longer requests are rejected")
_OFFLOAD_KV = Action("offload KV to CPU memory (LMCache or another KV connector via --kv-transfer-config, or vLLM's "
                     "native --kv-offloading-size)",
                     "a preempted or evicted prefix comes back by a copy, not a recompute",
                     "host memory and PCIe bandwidth; a copy on every hit; one more component to run")
_RAISE_PP = Action("raise pipeline_parallel_size", "less weight per GPU, more KV room",
                   "pipeline bubbles, higher latency", "pipeline_parallel_size", "raise")
_NORMALISE = Action("fix the template: normalise prompts upstream (one template, no timestamps/IDs/random fields "
                    "in the prefix, stable few-shot and tool order)",
                    "shared prefixes hit the cache: less prefill, lower TTFT", "changes in the calling application")

_CHECK_ABSTAINED = Action("check the evidence listed: the causes that could not be judged name the inputs they "
                          "lack (engine facts, a CPU source, DCGM); give them those inputs",
                          "a cause the diagnosis can name, with its own actions",
                          "configuration work; some inputs need the sidecar in vLLM's PID namespace or DCGM")
_CLIENT_VIEW = Action("compare with the objective measured at the client or the gateway",
                      "tells vLLM's share of the latency from a proxy's, the network's or a different measurement's",
                      "needs client-side or gateway latency metrics")

CAUSES: tuple[Cause, ...] = (
    Cause("A0", "A", "unknown", "First tokens miss their objective; no known cause explains it",
          "The first-token objective is missed, yet no cause the diagnosis knows for a slow first token, an "
          "idle engine, preemption or a slow data-parallel engine (A1-A6, C, D, G) fires: each is clear or could "
          "not be judged. What vLLM's "
          "metrics do not attribute: requests waiting for a LoRA adapter slot (--max-loras) without the "
          "lora_requests_info gauge A6 reads, or for KV blocks "
          "from a prefill instance (disaggregated serving), which vLLM counts as waiting by reason `deferred` "
          "(not capacity); a proxy, gateway or the network in front of vLLM; a client that measures the first "
          "token differently (its own clock, non-streamed responses).",
          (_CHECK_ABSTAINED,
           Action(f"look at the feature metrics named: {vllm.NUM_REQUESTS_WAITING_BY_REASON} "
                  "(reason deferred: LoRA slots, KV transfers) and, with LoRA, vLLM's lora_requests_info gauge "
                  "(adapters running and waiting against max_lora, set by --max-loras)",
                  "finds the waits that are not for capacity",
                  "raising --max-loras reserves GPU memory for more adapter slots (less KV); routing adapters "
                  "to their own replicas needs more replicas"),
           _CLIENT_VIEW)),
    Cause("A1", "A", "request", "Long prompts: prefill cost is intrinsic",
          "TTFT is mostly prefill of long prompts, with no queue or frontend delay behind it. Not a bug.",
          (Action("accept it, or shorten prompts (retrieval top-k, history truncation)", "lower TTFT",
                  "less context for the model"),
           Action("raise max_num_batched_tokens", "long prefills finish in fewer steps", "worse ITL, more KV pressure",
                  "max_num_batched_tokens", "raise"),
           Action("route long-context requests to a separate pool", "short requests stop paying for long ones",
                  "more replicas to run"))),
    Cause("A2", "A", "scheduler", "Requests wait in the queue while KV has room",
          "TTFT is mostly queue time and the waiting queue is sustained, but KV is not full: the token budget "
          "or the concurrency cap, not memory, holds requests back.",
          (Action("raise max_num_batched_tokens", "more prefill per step, the queue drains faster",
                  "worse ITL, more KV use per step", "max_num_batched_tokens", "raise"),
           Action("raise max_num_seqs", "more requests run at once", "KV consumed faster, sensitive to long requests",
                  "max_num_seqs", "raise"),
           Action("add replicas or shed load (--max-num-queued-reqs)", "bounded queue time",
                  "cost, or rejected requests"))),
    Cause("A3", "A", "cpu", "CPU busy: input processing or the engine loop is short of CPU",
          "Time outside the engine (tokenization, chat template, IPC) or a CPU-starvation signal explains TTFT.",
          (Action("give the pod at least 2 + N(GPUs) physical cores, no CPU limit below that",
                  "engine busy loop and frontend keep pace", "more CPU reserved per replica"),
           Action("scale out API servers (--api-server-count) or simplify templates/tokenization",
                  "input processing in parallel", "more processes, no process_* metrics in multiprocess mode"))),
    Cause("A4", "A", "scheduler", "max_num_batched_tokens too small for the prompts",
          "Prompts need many chunks of the token budget, so several scheduling rounds pass before the first token.",
          (Action("raise max_num_batched_tokens", "fewer chunks, lower TTFT, higher throughput",
                  "worse ITL and more jitter at peak, more KV per step", "max_num_batched_tokens", "raise"),)),
    Cause("A5", "A", "kv_cache", "Low prefix-cache hit rate makes every prefill pay full price",
          "Prefill dominates TTFT while prompts that span many blocks rarely hit the prefix cache; the root "
          "cause is usually upstream (see F).",
          (_NORMALISE,)),
    # -- LoRA adapter slots (issue 29) --
    Cause("A6", "A", "scheduler", "Requests wait for a LoRA adapter slot",
          "More LoRA adapters have requests in flight than one batch may hold (--max-loras): vLLM's scheduler "
          "skips a waiting request whose adapter has no free slot and keeps it waiting, counted by reason "
          "`deferred` (not capacity), until every running request of some other adapter has finished. KV has "
          "room; the first tokens wait for the slot.",
          (Action("raise max_loras", "more adapters share one batch: no request waits for another adapter's "
                  "requests to finish",
                  "each slot reserves GPU memory for one adapter's weights at --max-lora-rank in every layer's "
                  "target modules (fewer KV blocks), and a batch mixing more adapters runs the LoRA kernels "
                  "slower", "max_loras", "raise"),
           Action("merge the hottest adapter into the base weights and serve it from its own replicas, or route "
                  "each adapter to replicas that serve it (adapter-affinity routing)",
                  "the busiest adapter never waits for a slot", "more replicas or a gateway that routes by "
                  "adapter; a merged model is one more checkpoint to roll out"),
           Action("lower --max-lora-rank to the largest rank the adapters use, then raise max_loras in the memory "
                  "that frees", "more slots in the same memory", "adapters of a higher rank are refused"))),
    # -- KV transfer: disaggregated prefill/decode, KV connectors and offload (issue 29) --
    Cause("A7", "A", "distributed", "KV transfer slow: first tokens wait for KV from another instance",
          "This instance loads prompt KV through a KV connector (--kv-transfer-config: a decode instance of a "
          "disaggregated pair, or an offload tier) and the first-token objective is missed while requests spend "
          "much of their first-token time waiting, deferred, for their KV to arrive: vLLM defers a request from "
          "its admission until its load completes and schedules it only then, so the wait is neither a queue "
          "for capacity nor prefill. The link between the instances (or to the tier) is slow or shared by too "
          "many loads.",
          (Action("check the transfer path: NIXL on RDMA (UCX_TLS with rc/cuda_ipc, GPUDirect), not a TCP "
                  "fallback; prefill and decode instances in one rack or NVLink domain",
                  "loads at the link's speed: a few ms per prompt", "placement constraints on the scheduler"),
           Action("send fewer bytes per prompt: the same KV cache dtype on both sides, fp8 where the model "
                  "allows (--kv-cache-dtype fp8), matching tensor-parallel sizes (fewer, larger descriptors)",
                  "about half the bytes per prompt with fp8", "a small accuracy loss; both instances restart"),
           Action("let the proxy prefill short prompts on the decode instance (no transfer below a prompt length)",
                  "no load for prompts whose prefill costs less than their transfer",
                  "prefill work on the decode instance disturbs its streams (ITL)"))),
    Cause("A8", "A", "distributed", "KV transfer failing: loads from another instance fail",
          f"A share of this instance's KV loads fail ({vllm.NIXL_NUM_FAILED_TRANSFERS_TOTAL} counts transfer, "
          "handshake and notification failures). With vLLM's default kv_load_failure_policy (fail) each failed "
          "load ends its request with an error; with recompute its prompt is prefilled here instead, at prefill "
          "cost.",
          (Action("read both instances' logs for the connector's errors: the side-channel port reachable, NIXL "
                  "agent metadata exchanged, the UCX transport up; on the prefill instance, KV that expired "
                  f"before this instance read it ({vllm.NIXL_NUM_KV_EXPIRED_REQS_TOTAL}: raise "
                  "VLLM_NIXL_ABORT_REQUEST_TIMEOUT if decode reads late)",
                  "the failing link or peer named", "an operator's time"),
           Action("set kv_load_failure_policy to recompute in this instance's --kv-transfer-config",
                  "a failed load costs a local prefill, not a failed request",
                  "prefill work on the decode instance while loads fail: higher TTFT, ITL disturbed"),
           Action("take the failing prefill instance (or link) out of the proxy's pool",
                  "loads go to healthy peers", "less prefill capacity until it is fixed"))),
    Cause("B0", "B", "unknown", "Inter-token latency misses its objective; no known cause explains it",
          "The inter-token objective is missed, yet no cause the diagnosis knows for a slow stream, a starved "
          "CPU, preemption or parallelism overhead (B1-B4, C, D, G) fires: each is clear or could not be "
          "judged. What vLLM's metrics do not attribute: KV transfer to or from another instance "
          "(--kv-transfer-config); a proxy or the network that holds back streamed chunks; a client that "
          "measures the gap differently (per chunk, not per token). Under speculative decoding the objective "
          "is already judged per token (each output event's gap divided by the tokens it carried).",
          (_CHECK_ABSTAINED, _CLIENT_VIEW)),
    Cause("B1", "B", "scheduler", "Decode disturbed by prefill",
          "The ITL tail is far above its median while prompt tokens take a large share of computed tokens: "
          "prefill chunks cut into decode steps.",
          (Action("lower max_num_batched_tokens", "smaller prefill chunks next to decode, smoother ITL",
                  "higher TTFT, lower throughput", "max_num_batched_tokens", "lower"),
           Action("set --long-prefill-token-threshold (chunks a long prompt across steps)",
                  "one long prompt no longer fills a whole step", "long prompts take more steps to prefill"),
           Action("separate pools for interactive and offline traffic (or disaggregated prefill)",
                  "streams stop sharing steps with big prefills", "more replicas to run"))),
    Cause("B2", "B", "scheduler", "max_num_batched_tokens too large",
          "The largest steps use much of a budget that holds several whole prompts: prefills pile into one step "
          "next to decode, and every stream waits for that step.",
          (Action("lower max_num_batched_tokens", "better ITL", "higher TTFT, lower throughput",
                  "max_num_batched_tokens", "lower"),
           Action("use --performance-mode interactivity", "latency-oriented kernels and graphs",
                  "less aggregate tokens/s"))),
    Cause("B3", "B", "scheduler", "Throughput-oriented batch: ITL uniformly slow at high utilisation",
          "ITL is uniformly slow (no stutter) while the batch is full or the GPU busy: possibly a deliberate "
          "throughput configuration.",
          (Action("lower max_num_seqs", "better per-user ITL", "lower aggregate throughput", "max_num_seqs", "lower"),
           Action("or use --performance-mode interactivity", "latency-oriented kernels and graphs",
                  "less aggregate tokens/s"),
           Action("confirm the intent: keep it if throughput is the goal", "no change", "per-user ITL stays high"))),
    Cause("B4", "B", "gpu_compute", "Slow GPU execution path: the GPU is busy but decode crawls",
          "ITL is uniformly slow on a batch that is not full, the engine steps without pause and nothing "
          "waits on the CPU, yet the GPU moves far less memory per second than decode needs (or DCGM shows it "
          "busy): the kernels themselves are slow (attention backend, CUDA graphs off, eager mode, a "
          "quantization without fast kernels).",
          (Action("check the attention backend and CUDA graphs in vLLM's start-up log (no --enforce-eager)",
                  "decode back on the fast path", "a restart; more graph memory"),
           Action("use a quantization with native kernels on this GPU (or none)", "full-speed matmuls",
                  "re-quantised weights, accuracy check"),
           Action("upgrade vLLM / drivers if the backend fell back", "current kernels", "a rollout"))),
    Cause("B5", "B", "gpu_compute", "Speculative drafts mostly rejected",
          "Speculative decoding is on (--speculative-config) but the target model rejects most draft tokens: "
          "every verify step computes the draft positions and emits about one token, so the speculation costs "
          "GPU work, batch room and per-token latency instead of saving them (the drafter does not fit this "
          "traffic, e.g. n-gram lookup on sampled, non-repetitive output). Information while the inter-token "
          "objective is met; a cause of the slow stream when it is missed.",
          (Action("lower num_speculative_tokens in --speculative-config",
                  "fewer rejected draft positions verified per step", "fewer tokens per step where the drafts "
                  "do fit (a smaller speed-up on the traffic that accepts them)"),
           Action("use a drafter that fits the traffic: a draft model or EAGLE/MTP head made for the target model; "
                  "n-gram lookup only where outputs repeat their input (code edits, extraction, RAG)",
                  "higher acceptance, more tokens per step", "a drafter to obtain or train; its weights and KV "
                  "take GPU memory; a restart"),
           Action("turn speculative decoding off (drop --speculative-config)",
                  "no verification overhead, full batch room for decodes",
                  "loses the speed-up on traffic where drafts are accepted; a restart"))),
    Cause("C1", "C", "cpu", "CPU cannot feed the GPU",
          "A CPU-starvation signal is high while work is present: the engine loop, scheduler or frontend "
          "stalls and the accelerator idles in phases.",
          (Action("give enough cores (2 + N GPUs minimum), remove noisy neighbours and tight CPU quotas",
                  "engine steps resume full pace", "more CPU reserved"),
           Action("optimise pre/post-processing (templates, detokenization, streaming)", "less CPU per request",
                  "engineering time"))),
    Cause("C2", "C", "request", "Spare capacity: the workload does not form batches",
          "Few requests run and none wait: arrivals are too sparse (or too short-lived) to batch. Demand is met, "
          "so this is capacity information, never a verdict or a page.",
          (Action("aggregate requests (client-side batching, fewer replicas)", "bigger batches, better utilisation",
                  "consolidation may raise latency at peaks"),
           Action("accept it for latency-critical sparse traffic", "lowest per-request latency", "idle accelerator"))),
    Cause("C3", "C", "kv_cache", "KV pressure caps concurrency",
          "Requests wait while KV is full: the scheduler cannot add requests without preempting, so "
          "concurrency is capped by cache space.",
          (_RAISE_GMU, _RAISE_TP,
           Action("cap output length (max_tokens) and route long contexts elsewhere", "KV per request bounded",
                  "truncated outputs"))),
    Cause("D", "D", "kv_cache", "Frequent preemption: KV cache is short",
          "Preemptions per admitted request are frequent: V1 recomputes preempted requests, wasting GPU work "
          "and making running/waiting oscillate.",
          (_RAISE_GMU, _LOWER_SEQS, _LOWER_BUDGET_KV, _RAISE_TP, _RAISE_PP, _FP8_KV, _SHORTER_CONTEXT,
           _OFFLOAD_KV)),
    Cause("E", "E", "kv_cache", "No memory headroom: the engine is fragile at its KV cap",
          "Saturation alone is V1's normal regime. This fires on evidence of fragility: restarts (OOM) at the "
          "cap, or KV at the admission cap with a queue and preemptions or a latency tail. "
          "Free GPU memory on a monitor is not free KV.",
          (Action("bound outputs (max_tokens) and cap concurrency", "KV growth stays predictable",
                  "truncated outputs, less concurrency"),
           Action("if it restarts with OOM: lower gpu_memory_utilization", "room for activations and graphs at peak",
                  "fewer KV blocks", "gpu_memory_utilization", "lower"),
           _RAISE_TP, _FP8_KV)),
    Cause("F", "F", "kv_cache", "Prefix cache ineffective: hit ratio and KV usage cannot name the cause",
          "Prompts span many KV blocks and share part of every prompt (some blocks hit), yet few tokens hit the "
          "cache and the misses cost users their objective, while the KV pool ran out at times, short of full: "
          "the misses may be prompts that change before their shared part (F1) or the pool's evictions (F6), "
          "and hit ratio and KV usage cannot say which. vLLM's block residency (--kv-cache-metrics) can: with it "
          "the finding moves to F1 or F6. Information when no prompt shares even one cached block (unique "
          "documents by design, or a prefix broken in its first block) or the misses cost no one.",
          (Action("run vLLM with --kv-cache-metrics (block lifetimes and reuse gaps, sampled)",
                  "the diagnosis names the prompts (F1) or the pool (F6)",
                  "a little engine CPU per sampled block; a restart"),
           _NORMALISE)),
    Cause("F1", "F", "request", "Prompts never reused: the template or the prompt changes before its shared part",
          "Prompts span many KV blocks and share part of every prompt (some blocks hit), yet few tokens hit the "
          "cache and the misses cost the first tokens or the token gaps their objective, while the pool is not "
          "what loses them: KV has room, or, with --kv-cache-metrics, the evicted blocks were never reused while "
          "they lived. The shared prefix breaks early (timestamps, request IDs, template drift, tool or few-shot "
          "order): a larger cache keeps nothing these prompts come back for. The workload's to fix, not the "
          "engine's.",
          (_NORMALISE,)),
    Cause("F6", "F", "kv_cache", "Prefix cache too small: hot prefixes are evicted before their reuse",
          "Few prompt tokens hit the cache while KV is full (or, with --kv-cache-metrics, the evicted blocks had "
          "been reused while they lived): the working set of prefixes, or the sequences beside it, outgrow the "
          "pool, and cached prefix blocks are evicted (LRU) before prompts come back for them.",
          (_RAISE_GMU,
           Action("route requests by prefix (prefix-aware load balancing)", "each replica holds fewer prefixes",
                  "uneven load across replicas"),
           _LOWER_SEQS,
           Action("offload KV to CPU (KV connector)", "a larger cache tier", "transfer latency, host memory"))),
    Cause("G", "G", "distributed", "Parallelism overhead without memory pressure",
          "TP/PP > 1 while KV has room to spare and latency is uniformly slow: communication and pipeline "
          "bubbles cost more than the memory they bought.",
          (Action("lower tensor_parallel_size and run data-parallel replicas instead",
                  "no per-layer all-reduce, lower ITL", "less KV per replica, the model must fit",
                  "tensor_parallel_size", "lower"),
           Action("keep TP inside one node (NVLink), avoid PP across nodes", "cheaper communication",
                  "placement constraints"))),
    # -- Data-parallel engines (issue 29) --
    Cause("G2", "G", "distributed", "One data-parallel engine is slower or more loaded than its siblings",
          "Data-parallel engines behind one server (the `engine` label) should see alike load and latency. One "
          "engine's mean load (running + waiting) or mean TTFT/ITL stands far above its siblings': its requests "
          "miss the objective while the merged numbers hide which engine it is. A slow engine points at its "
          "GPU (clocks, thermal or power capping, Xid/ECC errors), its host side (CPU/NUMA binding, a noisy "
          "neighbour) or its share of long requests; a loaded one at the load balancer.",
          (Action("check the outlier engine's GPU and host (nvidia-smi clocks and throttle reasons, Xid errors, "
                  "CPU/NUMA binding) and restart or cordon its rank if it is faulty",
                  "the engine serves at its siblings' pace again",
                  "the engine's in-flight requests are lost on a restart; less capacity while it is out"),
           Action("balance by load: keep vLLM's internal DP load balancer (it routes by waiting and running "
                  "counts), or make the external one route by queue length, not round-robin",
                  "an engine that falls behind gets fewer new requests",
                  "an external balancer needs the per-engine load exported to it"))),
)

SYMPTOM_BY_ID: Mapping[str, Symptom] = MappingProxyType({s.id: s for s in SYMPTOMS})
CAUSE_BY_ID: Mapping[str, Cause] = MappingProxyType({c.id: c for c in CAUSES})
# Layer `unknown` is for the causes of an effect without a known cause only; every other cause has a layer.
assert all((c.layer in LAYERS or (c.layer == "unknown" and c.id in EFFECT_WITHOUT_CAUSE.values()))
           and c.symptom in SYMPTOM_BY_ID for c in CAUSES)
assert all(CAUSE_BY_ID[cid].symptom in EXPLAINED_BY[objective] and CAUSE_BY_ID[cid].layer == "unknown"
           for objective, cid in EFFECT_WITHOUT_CAUSE.items())
