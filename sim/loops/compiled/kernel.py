"""The compiled step loop: continuous batching and chunked prefill over replicas behind a router.

It is the SimPy loop of ``sim/replica.py`` and ``sim/cluster.py`` stepped one step at a time,
with the policies of ``sim/policies``, the roofline of ``sim/cost/roofline.py`` and the
profiled cost of ``sim/cost/profiled.py`` written as scalar loops that numba compiles. Events
are taken in SimPy's order (time, then creation), the arithmetic is the same, so results are
identical to the reference loop (tests/sim/test_compiled.py compares every per-request and
per-step number).

Each step is a handful of integer loops over the batch: compiled, stepping one by one costs
less than fast-forwarding does in Python, so there is no fast-forward here.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Replica parameters (int64 columns of ``ip``).
POLICY, NUM_BLOCKS, BLOCK_SIZE, MAX_SEQS, MAX_BATCHED, CHUNK, WATERMARK = range(7)
CONTINUOUS, CHUNKED = 0, 1
# Roofline coefficients (float64 columns of ``fp``), see RooflineCost.
(OVERHEAD, QKV_F, QKV_B0, QKV_B1, O_F, O_B0, O_B1, MLP_F, MLP_B0, MLP_B1, PRE_F, PRE_B, DEC_F,
 DEC_B, REST, LM_F, LM_B, TP_GT_1, TWO_L, HIDDEN, ABYTES, AR_FACTOR, LINK, LATENCY,
 PROFILE_OVERHEAD) = range(25)
NUM_COST = 25
# Cost models, and a profile's tables, fits and step features (see sim/compiled/costs.py).
ROOFLINE, PROFILE_STEP, PROFILE_OPS = 0, 1, 2
T_LINEAR, T_OTHER, T_LM_HEAD, T_ALLREDUCE = range(4)
NUM_TABLES = 4
F_ATTN_PREFILL, F_ATTN_DECODE, F_STEP = range(3)
(X_CONST, X_NUM_TOKENS, X_PREFILL_ATTN, X_DECODE_CONTEXT, X_NUM_SEQS, X_NUM_SAMPLED, X_PREFILL_ROWS,
 X_DECODE_ROWS) = range(8)
NUM_FEATURES = 8
NUM_COUNTERS = NUM_TABLES + 3 * NUM_FEATURES  # tables, then each fit's features
# Routers.
ROUND_ROBIN, LEAST_OUTSTANDING, LEAST_KV = 0, 1, 2
# Request status and reject reasons (sim.core.requests).
WAITING, RUNNING, FINISHED, REJECTED = 1, 2, 3, 4
KV_CAPACITY, MAX_MODEL_LEN, BATCH_TOKENS = 1, 2, 3
# What a replica's pending event is.
NONE, WAKE, STEP_END = 0, 1, 2


@njit(cache=True)
def _max(a, b):
    return a if a >= b else b


@njit(cache=True)
def _blocks_for(tokens, bs):
    return -(-tokens // bs)


@njit(cache=True)
def roofline_time(fp, tokens, prefill_tokens, prefill_attn, decode_context, num_sampled):
    """RooflineCost.step_time of one non-speculative step, summed in the same order."""
    total = fp[OVERHEAD]
    total = total + _max(fp[QKV_F] * tokens, fp[QKV_B0] + fp[QKV_B1] * tokens)
    total = total + _max(fp[O_F] * tokens, fp[O_B0] + fp[O_B1] * tokens)
    total = total + _max(fp[MLP_F] * tokens, fp[MLP_B0] + fp[MLP_B1] * tokens)
    total = total + _max(fp[PRE_F] * prefill_attn, fp[PRE_B] * prefill_tokens)
    total = total + fp[REST] * tokens
    total = total + _lm_head_shape(fp, num_sampled)
    if fp[TP_GT_1] != 0.0:
        act = tokens * fp[HIDDEN] * fp[ABYTES]
        total = total + fp[TWO_L] * (fp[AR_FACTOR] * act / fp[LINK] + fp[LATENCY])
    total = total + _max(fp[DEC_F] * decode_context, fp[DEC_B] * decode_context)
    return total


@njit(cache=True)
def _interp(xs, ys, n, x):
    """np.interp at one point, with the same arithmetic (numpy's arr_interp)."""
    if x < xs[0]:
        return ys[0]
    if x >= xs[n - 1]:
        return ys[n - 1]
    lo, hi = 0, n - 1  # xs[lo] <= x < xs[hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if xs[mid] <= x:
            lo = mid
        else:
            hi = mid
    if xs[lo] == x:
        return ys[lo]
    slope = (ys[lo + 1] - ys[lo]) / (xs[lo + 1] - xs[lo])
    y = slope * (x - xs[lo]) + ys[lo]
    if y != y:  # NaN one way: try the other
        y = slope * (x - xs[lo + 1]) + ys[lo + 1]
        if y != y and ys[lo] == ys[lo + 1]:
            y = ys[lo]
    return y


@njit(cache=True)
def _linear_shape(fp, x):
    """The roofline's matmuls (QKV, O, MLP) at ``x`` tokens: the shape a linear table follows."""
    total = 0.0 + _max(fp[QKV_F] * x, fp[QKV_B0] + fp[QKV_B1] * x)
    total = total + _max(fp[O_F] * x, fp[O_B0] + fp[O_B1] * x)
    return total + _max(fp[MLP_F] * x, fp[MLP_B0] + fp[MLP_B1] * x)


@njit(cache=True)
def _lm_head_shape(fp, x):
    return _max(fp[LM_F] * x, fp[LM_B] * (1.0 if x > 0 else 0.0))


@njit(cache=True)
def _table(tab, tab_n, extrap, r, t, fp, x):
    """ProfiledCost._table: interpolate; beyond the last point scale the last value by the
    roofline's ratio t(x)/t(x_max) (bytes for the all-reduce), counting the step."""
    n = tab_n[r, t]
    xs, ys = tab[r, t, 0], tab[r, t, 1]
    if not x > xs[n - 1]:
        return _interp(xs, ys, n, x)
    extrap[r, t] += 1
    edge = xs[n - 1]
    if t == T_LINEAR:
        ratio = _linear_shape(fp, x) / _linear_shape(fp, edge)
    elif t == T_OTHER:
        ratio = (0.0 + fp[REST] * x) / (0.0 + fp[REST] * edge)
    elif t == T_LM_HEAD:
        ratio = _lm_head_shape(fp, x) / _lm_head_shape(fp, edge)
    else:
        ratio = x / edge
    return ys[n - 1] * ratio


@njit(cache=True)
def _fit(fit, fit_x, fit_n, extrap, r, f, tokens, seqs, prefill_attn, decodes, decode_context, sampled):
    """ProfiledCost._fit: Σ coef·feature in the fit's order, floored at 0, counting features
    above their measured range."""
    total = 0.0
    for j in range(fit_n[r, f]):
        x = fit_x[r, f, j]
        if x == X_CONST:
            v = 1.0
        elif x == X_NUM_TOKENS:
            v = tokens
        elif x == X_PREFILL_ATTN:
            v = prefill_attn
        elif x == X_DECODE_CONTEXT:
            v = decode_context
        elif x == X_NUM_SEQS:
            v = seqs
        elif x == X_NUM_SAMPLED:
            v = sampled
        elif x == X_PREFILL_ROWS:
            v = seqs - decodes
        else:
            v = decodes
        if v > fit[r, f, 1, j]:
            extrap[r, NUM_TABLES + f * NUM_FEATURES + x] += 1
        total = total + fit[r, f, 0, j] * v
    return total if (total >= 0.0 or total != total) else 0.0  # np.maximum(total, 0.0)


@njit(cache=True)
def price(kind, r, fp, tab, tab_n, fit, fit_x, fit_n, extrap, tokens, seqs, prefill_tokens, prefill_attn,
          decodes, decode_context, sampled):
    """The step's duration under replica ``r``'s cost model: the roofline, or a profile's
    whole-step fit, or its operations added up in ProfiledCost.op_times' order."""
    if kind == ROOFLINE:
        return roofline_time(fp, tokens, prefill_tokens, prefill_attn, decode_context, sampled)
    if kind == PROFILE_STEP:
        return _fit(fit, fit_x, fit_n, extrap, r, F_STEP, tokens, seqs, prefill_attn, decodes,
                    decode_context, sampled) + fp[PROFILE_OVERHEAD]
    total = 0.0 + _table(tab, tab_n, extrap, r, T_LINEAR, fp, tokens)
    if tab_n[r, T_OTHER]:
        total = total + _table(tab, tab_n, extrap, r, T_OTHER, fp, tokens)
    else:
        total = total + fp[REST] * tokens
    if tab_n[r, T_LM_HEAD]:
        head = _table(tab, tab_n, extrap, r, T_LM_HEAD, fp, _max(sampled, tab[r, T_LM_HEAD, 0, 0]))
        total = total + (head if sampled > 0 else 0.0)
    else:
        total = total + _lm_head_shape(fp, sampled)
    if fit_n[r, F_ATTN_PREFILL]:
        attn = _fit(fit, fit_x, fit_n, extrap, r, F_ATTN_PREFILL, tokens, seqs, prefill_attn, decodes,
                    decode_context, sampled)
        total = total + (attn if prefill_tokens > 0 else 0.0)
    else:
        total = total + _max(fp[PRE_F] * prefill_attn, fp[PRE_B] * prefill_tokens)
    if fit_n[r, F_ATTN_DECODE]:
        attn = _fit(fit, fit_x, fit_n, extrap, r, F_ATTN_DECODE, tokens, seqs, prefill_attn, decodes,
                    decode_context, sampled)
        total = total + (attn if decodes > 0 else 0.0)
    else:
        total = total + _max(fp[DEC_F] * decode_context, fp[DEC_B] * decode_context)
    if fp[TP_GT_1] != 0.0:
        act = tokens * fp[HIDDEN] * fp[ABYTES]
        if tab_n[r, T_ALLREDUCE]:
            total = total + fp[TWO_L] * _table(tab, tab_n, extrap, r, T_ALLREDUCE, fp, act)
        else:
            total = total + fp[TWO_L] * (fp[AR_FACTOR] * act / fp[LINK] + fp[LATENCY])
    return total + fp[PROFILE_OVERHEAD]


@njit(cache=True)
def _grow_queue(q, qhead, qlev):
    """Double every ring buffer, unrolling each so its head sits at 0."""
    rows, cap = q.shape
    bigger = np.empty((rows, 2 * cap), dtype=np.int64)
    for row in range(rows):
        for i in range(qlev[row]):
            bigger[row, i] = q[row, (qhead[row] + i) % cap]
        qhead[row] = 0
    return bigger


# The waiting queues (WaitQueue): replica r's priority level l (0 = the lowest priority value,
# served first) is ring buffer r * levels + l of ``q``, with its head in ``qhead`` and its
# length in ``qlev``; ``qlen[r]`` counts the replica's whole queue.
@njit(cache=True)
def _enqueue(q, qhead, qlev, qlen, r, row, rid, front):
    """Add ``rid`` at the back of its level (or the front: a preempted request goes first)."""
    if qlev[row] == q.shape[1]:
        q = _grow_queue(q, qhead, qlev)
    if front:
        qhead[row] = (qhead[row] - 1) % q.shape[1]
        q[row, qhead[row]] = rid
    else:
        q[row, (qhead[row] + qlev[row]) % q.shape[1]] = rid
    qlev[row] += 1
    qlen[r] += 1
    return q


@njit(cache=True)
def _head(qlev, r, levels):
    """The ring buffer holding replica r's next request: its first non-empty level."""
    for row in range(r * levels, (r + 1) * levels):
        if qlev[row] > 0:
            return row
    return -1


@njit(cache=True)
def _dequeue(q, qhead, qlev, qlen, r, row):
    qhead[row] = (qhead[row] + 1) % q.shape[1]
    qlev[row] -= 1
    qlen[r] -= 1


@njit(cache=True)
def _decodes(r, chunked, running, nrun, num_tokens, num_computed, num_blocks, status, preemptions,
             free, preempted, q, qhead, qlev, qlen, level, p_ids, p_new, need, bs):
    """The running requests' next tokens (chunked: only those past their prompt), their new
    blocks given, preempting the newest running requests until the rest fit (Policy._grow).
    Returns the plan's rows, whether anyone is still prefilling, and the (maybe grown) queue."""
    pn = 0
    prefilling = False
    for i in range(nrun[r]):
        rid = running[r, i]
        left = num_tokens[rid] - num_computed[rid]
        if chunked and not (left == 1 and num_computed[rid] > 0):
            prefilling = True
            continue
        p_ids[r, pn] = rid
        p_new[r, pn] = left
        pn += 1
    while True:
        total = 0
        for i in range(pn):
            rid = p_ids[r, i]
            d = _blocks_for(num_computed[rid] + p_new[r, i], bs) - num_blocks[rid]
            need[i] = d if d > 0 else 0
            total += need[i]
        if total <= free[r] or nrun[r] == 0:
            break
        # Policy._preempt by recompute: the newest running request goes back to the queue's head.
        victim = running[r, nrun[r] - 1]
        nrun[r] -= 1
        preempted[r] = True
        preemptions[victim] += 1
        status[victim] = WAITING
        free[r] += num_blocks[victim]
        num_blocks[victim] = 0
        num_computed[victim] = 0
        levels = q.shape[0] // nrun.shape[0]
        q = _enqueue(q, qhead, qlev, qlen, r, r * levels + level[victim], victim, True)
        k = 0
        for i in range(pn):
            if p_ids[r, i] != victim:
                p_ids[r, k] = p_ids[r, i]
                p_new[r, k] = p_new[r, i]
                k += 1
        pn = k
    if total:
        free[r] -= total
        for i in range(pn):
            num_blocks[p_ids[r, i]] += need[i]
    return pn, prefilling, q


@njit(cache=True)
def _admit(r, chunked, budget, seq_room, pn, q, qhead, qlev, qlen, running, nrun, prompt_len, output_len,
           num_tokens, num_generated, num_computed, num_blocks, status, reject_reason, free, ip,
           max_model_len, p_ids, p_new):
    """Policy._admit_waiting: the head of the queue joins while it fits; requests that can
    never run are rejected on the way. Returns the plan's rows."""
    bs = ip[r, BLOCK_SIZE]
    capacity = budget
    room = free[r] - ip[r, WATERMARK]
    added = 0
    levels = q.shape[0] // nrun.shape[0]
    while qlen[r] > 0 and budget > 0 and added < seq_room:
        row = _head(qlev, r, levels)
        rid = q[row, qhead[row]]
        total_len = prompt_len[rid] + output_len[rid]
        reason = 0
        if total_len > max_model_len:
            reason = MAX_MODEL_LEN
        elif _blocks_for(total_len, bs) > ip[r, NUM_BLOCKS]:
            reason = KV_CAPACITY
        take = min(num_tokens[rid], budget) if chunked else num_tokens[rid]
        if reason == 0 and take > budget:
            oversized = take > capacity
            if oversized and num_generated[rid] == 0:
                reason = BATCH_TOKENS  # a whole prompt larger than any step
            elif not (oversized and added == 0):
                break  # wait for the next step's budget
        if reason != 0:
            _dequeue(q, qhead, qlev, qlen, r, row)
            status[rid] = REJECTED
            reject_reason[rid] = reason
            continue
        d = _blocks_for(take, bs)
        if d > room:
            break
        _dequeue(q, qhead, qlev, qlen, r, row)
        free[r] -= d
        room -= d
        num_computed[rid] = 0
        num_blocks[rid] = d
        status[rid] = RUNNING
        running[r, nrun[r]] = rid
        nrun[r] += 1
        p_ids[r, pn] = rid
        p_new[r, pn] = take
        pn += 1
        added += 1
        budget -= take
    return pn


@njit(cache=True)
def simulate_kernel(arrival, prompt_len, output_len, num_tokens, num_computed, num_generated,
                    num_blocks, status, reject_reason, replica, preemptions, first_scheduled,
                    first_token, completion, ip, max_model_len, router,
                    cost_kind, fp, tab, tab_n, fit, fit_x, fit_n, extrap,
                    level, running, nrun, q, qhead, qlev, qlen, free, preempted, p_ids, p_new, p_comp,
                    p_samp, p_n, need, start, duration, used_at, queued_at, ev_kind, ev_time, ev_eid,
                    listening, clock_i, clock_f, log_i, log_f):
    """Run requests until the step log ``log_i``/``log_f`` is full or everyone is done.

    Mutates the request columns and the loop state (see LoopState); writes one row per step:
    int32 (replica, num_seqs, num_tokens, prefill_tokens, decode_seqs, kv_blocks_used,
    queue_len) and float64 (start, duration). Returns (rows written, finished, queue array).
    """
    n = arrival.shape[0]
    R = ip.shape[0]
    eid, rr, next_rid, arr_pending, arr_eid, started = clock_i
    arr_time, now = clock_f
    first = started == 0
    row = 0

    while True:
        if row == log_i.shape[0]:  # the log chunk is full: hand it over, to be called again
            clock_i[0], clock_i[1], clock_i[2], clock_i[3], clock_i[4], clock_i[5] = (
                eid, rr, next_rid, arr_pending, arr_eid, 1)
            clock_f[0], clock_f[1] = arr_time, now
            return row, False, q
        if first:  # t = 0: every replica finds nothing to do and listens; arrivals start
            first = False
            for r in range(R):
                listening[r] = True
            kind, who = 3, -1
        else:
            # The next event: earliest time, then earliest created (SimPy's order).
            who = -1
            best_t = np.inf
            best_e = 0
            if arr_pending:
                best_t, best_e, who = arr_time, arr_eid, R
            for r in range(R):
                if ev_kind[r] != NONE and (ev_time[r] < best_t or (ev_time[r] == best_t and ev_eid[r] < best_e)):
                    best_t, best_e, who = ev_time[r], ev_eid[r], r
            if who < 0:
                break
            now = best_t
            if who == R:
                arr_pending = 0
                kind = 3
            else:
                kind = ev_kind[who]
                ev_kind[who] = NONE

        if kind == 3:
            # The arrival process: submit every request due by now, then wait for the next.
            while next_rid < n:
                rid = next_rid
                if arrival[rid] > now:
                    arr_pending, arr_time, arr_eid = 1, arrival[rid], eid
                    eid += 1
                    break
                if router == ROUND_ROBIN:
                    r = rr
                    rr = (rr + 1) % R
                else:
                    r = 0
                    best_load = np.inf
                    best_out = 0
                    for c in range(R):
                        out = qlen[c] + nrun[c]
                        if router == LEAST_KV:
                            load = (ip[c, NUM_BLOCKS] - free[c]) / max(ip[c, NUM_BLOCKS], 1)
                            if load < best_load or (load == best_load and out < best_out):
                                r, best_load, best_out = c, load, out
                        elif c == 0 or out < best_out:
                            r, best_out = c, out
                replica[rid] = r
                status[rid] = WAITING
                q = _enqueue(q, qhead, qlev, qlen, r, r * (q.shape[0] // R) + level[rid], rid, False)
                if listening[r] and ev_kind[r] == NONE:  # notify: wake it up now
                    ev_kind[r], ev_time[r], ev_eid[r] = WAKE, now, eid
                    eid += 1
                next_rid += 1
            continue

        r = who
        if kind == WAKE:
            listening[r] = False
        else:
            # The step has ended: commit it (Policy.commit) and record it (Replica._record).
            bs = ip[r, BLOCK_SIZE]
            tokens = 0
            decodes = 0
            any_done = False
            for i in range(p_n[r]):
                rid = p_ids[r, i]
                num_computed[rid] = p_comp[r, i] + p_new[r, i]
                tokens += p_new[r, i]
                if p_new[r, i] == 1 and p_comp[r, i] > 0:
                    decodes += 1
                if p_samp[r, i]:
                    g = num_generated[rid] + 1
                    num_generated[rid] = g
                    num_tokens[rid] += 1
                    if np.isnan(first_token[rid]):
                        first_token[rid] = now
                    if g >= output_len[rid]:
                        status[rid] = FINISHED
                        free[r] += num_blocks[rid]
                        num_blocks[rid] = 0
                        completion[rid] = now
                        any_done = True
            if any_done:
                k = 0
                for i in range(nrun[r]):
                    rid = running[r, i]
                    if status[rid] == RUNNING:
                        running[r, k] = rid
                        k += 1
                nrun[r] = k
            log_i[row, 0] = r
            log_i[row, 1] = p_n[r]
            log_i[row, 2] = tokens
            log_i[row, 3] = tokens - decodes
            log_i[row, 4] = decodes
            log_i[row, 5] = used_at[r]
            log_i[row, 6] = queued_at[r]
            log_f[row, 0] = start[r]
            log_f[row, 1] = duration[r]
            row += 1

        # The replica's loop: schedule the next step, or listen for arrivals.
        bs = ip[r, BLOCK_SIZE]
        pn = 0
        if ip[r, POLICY] == CHUNKED:  # ChunkedPrefill.schedule
            budget = ip[r, CHUNK]
            pn, prefilling, q = _decodes(r, True, running, nrun, num_tokens, num_computed, num_blocks,
                                         status, preemptions, free, preempted, q, qhead, qlev, qlen, level,
                                         p_ids, p_new, need, bs)
            budget -= pn
            if prefilling:  # part-done prefills continue, oldest first
                for i in range(nrun[r]):
                    rid = running[r, i]
                    done = num_computed[rid]
                    rest = num_tokens[rid] - done
                    if not (rest > 1 or done == 0):
                        continue
                    if budget <= 0:
                        break
                    take = min(rest, budget)
                    d = _blocks_for(done + take, bs) - num_blocks[rid]
                    if d > free[r]:
                        break
                    free[r] -= d
                    num_blocks[rid] += d
                    p_ids[r, pn] = rid
                    p_new[r, pn] = take
                    pn += 1
                    budget -= take
            seq_room = ip[r, MAX_SEQS] - nrun[r]
            if budget > 0 and seq_room > 0 and qlen[r] > 0 and not preempted[r]:
                pn = _admit(r, True, budget, seq_room, pn, q, qhead, qlev, qlen, running, nrun, prompt_len,
                            output_len, num_tokens, num_generated, num_computed, num_blocks, status,
                            reject_reason, free, ip, max_model_len, p_ids, p_new)
        else:  # ContinuousBatching.schedule: admit whole prompts, else decode everyone
            seq_room = ip[r, MAX_SEQS] - nrun[r]
            if qlen[r] > 0 and seq_room > 0:
                pn = _admit(r, False, ip[r, MAX_BATCHED], seq_room, 0, q, qhead, qlev, qlen, running, nrun,
                            prompt_len, output_len, num_tokens, num_generated, num_computed, num_blocks,
                            status, reject_reason, free, ip, max_model_len, p_ids, p_new)
            if pn == 0 and nrun[r] > 0:
                pn, prefilling, q = _decodes(r, False, running, nrun, num_tokens, num_computed, num_blocks,
                                             status, preemptions, free, preempted, q, qhead, qlev, qlen, level,
                                             p_ids, p_new, need, bs)

        if pn == 0:
            listening[r] = True
            continue
        # The plan (Policy._plan) and its price (StepShape.of, RooflineCost.step_time).
        preempted[r] = False
        tokens = 0
        decodes = 0
        decode_context = 0
        qctx = 0
        sampled = 0
        for i in range(pn):
            rid = p_ids[r, i]
            c = num_computed[rid]
            new = p_new[r, i]
            p_comp[r, i] = c
            p_samp[r, i] = c + new == num_tokens[rid]
            if p_samp[r, i]:
                sampled += 1
            ctx = c + new
            tokens += new
            qctx += new * ctx
            if new == 1 and c > 0:
                decodes += 1
                decode_context += ctx
            if np.isnan(first_scheduled[rid]):
                first_scheduled[rid] = now
        p_n[r] = pn
        prefill_attn = float(qctx - decode_context) if decodes < pn else 0.0
        start[r] = now
        used_at[r] = ip[r, NUM_BLOCKS] - free[r]
        queued_at[r] = qlen[r]
        duration[r] = price(cost_kind[r], r, fp[r], tab, tab_n, fit, fit_x, fit_n, extrap, float(tokens),
                            float(pn), float(tokens - decodes), prefill_attn, float(decodes),
                            float(decode_context), float(sampled))
        ev_kind[r], ev_time[r], ev_eid[r] = STEP_END, now + duration[r], eid
        eid += 1

    return row, True, q
