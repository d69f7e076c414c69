"""The hot path's SQL (PostgreSQL migration 19): a run's common state changes, each done in the database.

A run's life on the hot path is four kinds of write: its **submit**, the **claim** of its first step from a
broker message, each **carry** (a step's end and the run's next step claimed for the same worker), and its
**end** (the last step's end, the run final). :data:`BATCH` (``sealflow_hot_batch``) applies a batch of them in
one statement, in its own transaction: it takes the writers' lock (:mod:`.batching`) first, so it runs
between the other writers exactly as one of them would, and holds it only while the database works (a writer
of the shared code holds it across its round trips and its process's Python); then each item in its turn,
by its kind's function below; then the audit events of the items that were written, linked to their
tenants' chains in one call (:mod:`.chainlink`).

Each kind's function does what the shared statement code (``store/sqlite/``) does for that change in its
common form, and nothing when the store is not as the caller expects: it answers ``general`` when the change
needs what only the shared code does (a refusal to audit, slots to give back, a fan-out to settle, a run in an
unusual state), and ``fence`` with what it found when the attempt or the run moved on; the caller then goes
the shared way or refuses as the shared code refuses (:mod:`.hotitems`). Items are JSON objects; each answer
is a JSON object ``{"s": status, ...}``. An item whose statements fail is undone alone (its own
subtransaction) and answered ``{"s": "error", "e": SQLSTATE and message}``: one item never breaks its batch.
"""

from __future__ import annotations

from sealflow.store.postgres.batching import WRITERS_KEY

#: the item's step ends (the attempt's final state, its result, a ledger entry, usage): shared by carry and end
_STEP_END = """
  UPDATE attempts SET state = it->>'a_state', output = COALESCE(it->>'a_out', output), error_class = it->>'a_ec',
    error_message = it->>'a_em', data = COALESCE(it->>'a_data', data), ended_at = (it->>'now')::DOUBLE PRECISION,
    lease_owner = NULL, lease_expires = NULL
    WHERE run_id = it->>'run' AND step_id = it->>'step' AND attempt = (it->>'att')::BIGINT;
  IF (it->>'a_res')::BOOLEAN THEN
    INSERT INTO results (run_id, step_id, status, output) VALUES (it->>'run', it->>'step', it->>'a_state', it->>'a_out')
      ON CONFLICT (run_id, step_id) DO UPDATE SET status = excluded.status, output = excluded.output;
  END IF;
  IF it->>'l_key' IS NOT NULL THEN
    INSERT INTO ledger (tenant, key, run_id, step_id, result, created_at)
      VALUES (it->>'l_tenant', it->>'l_key', it->>'l_run', it->>'l_step', it->>'l_res',
        (it->>'now')::DOUBLE PRECISION) ON CONFLICT DO NOTHING;
  END IF;
"""

#: the run's usage charged to its tenant's day, and the attempt's usage reservation dropped
_USAGE = """
  IF (it->>'r_tok')::BIGINT <> 0 OR (it->>'r_cost')::DOUBLE PRECISION <> 0 THEN
    INSERT INTO tenant_usage (tenant, day, tokens, cost_usd)
      VALUES (f.tenant, (it->>'day')::BIGINT, (it->>'r_tok')::BIGINT, (it->>'r_cost')::DOUBLE PRECISION)
      ON CONFLICT (tenant, day) DO UPDATE SET tokens = tenant_usage.tokens + excluded.tokens,
        cost_usd = tenant_usage.cost_usd + excluded.cost_usd;
  END IF;
  IF it->>'v_key' IS NOT NULL THEN
    DELETE FROM usage_reservations WHERE key = it->>'v_key';
  END IF;
"""

#: the run moves on (a commit's ``_UPDATE_RUN`` of the shared code): its revision, time, output, error, usage
_RUN_MOVES = """rev = rev + 1, updated_at = (it->>'now')::DOUBLE PRECISION, output = COALESCE(it->>'r_out', output),
      error_class = COALESCE(it->>'r_ec', error_class), error_message = COALESCE(it->>'r_em', error_message),
      steps_executed = steps_executed + (it->>'r_steps')::BIGINT, tokens = tokens + (it->>'r_tok')::BIGINT,
      cost_usd = cost_usd + (it->>'r_cost')::DOUBLE PRECISION, tool_calls = tool_calls + (it->>'r_tools')::BIGINT"""

#: the fence of a commit: the run and the attempt as the engine saw them (Commit.seen), else 'fence'
_FENCE = """
  SELECT rn.state, rn.rev, a.state AS astate, a.token, rn.tenant, rn.parent_run_id INTO f
    FROM runs rn LEFT JOIN attempts a ON a.run_id = rn.id AND a.step_id = it->>'step'
      AND a.attempt = (it->>'att')::BIGINT
    WHERE rn.id = it->>'run';
  IF NOT FOUND THEN
    RETURN jsonb_build_object('s', 'fence');
  END IF;
  IF f.state IS DISTINCT FROM it->>'s_state' OR f.rev IS DISTINCT FROM (it->>'s_rev')::BIGINT
     OR f.astate IS DISTINCT FROM it->>'s_astate' OR f.token IS DISTINCT FROM (it->>'tok')::BIGINT
     OR f.tenant IS DISTINCT FROM it->>'s_tenant' OR f.parent_run_id IS DISTINCT FROM it->>'s_parent' THEN
    RETURN jsonb_build_object('s', 'fence', 'f', jsonb_build_array(f.state, f.rev, f.astate, f.token, f.tenant,
      f.parent_run_id));
  END IF;
"""

#: the run's columns that change over its life (rows.RUN_CHANGING), as a JSON array
_CHANGING = ("jsonb_build_array(r.state, r.rev, r.updated_at, r.deadline, r.output, r.error_class, r.error_message, "
             "r.steps_executed, r.tokens, r.cost_usd, r.tool_calls, r.redrives, r.cursor_step, r.cursor_attempt, "
             "r.signer)")

CARRY = """
CREATE FUNCTION sealflow_hot_carry(it JSONB) RETURNS JSONB LANGUAGE plpgsql AS $$
DECLARE
  f RECORD;
  r RECORD;
  n BIGINT;
BEGIN
""" + _FENCE + _STEP_END + """
  SELECT COALESCE(MAX(attempt), 0) + 1 INTO n FROM attempts WHERE run_id = it->>'run' AND step_id = it->>'n_step';
  INSERT INTO attempts (run_id, step_id, attempt, try_no, state, token, lease_owner, lease_expires, lease_ms,
      scheduled_at, started_at, due_at, data, seq)
    VALUES (it->>'run', it->>'n_step', n, (it->>'n_try')::BIGINT, 'running', (it->>'n_tok')::BIGINT, it->>'owner',
      (it->>'n_lexp')::DOUBLE PRECISION, (it->>'n_lms')::BIGINT, (it->>'now')::DOUBLE PRECISION,
      (it->>'now')::DOUBLE PRECISION, (it->>'n_due')::DOUBLE PRECISION, it->>'n_data', f.rev + 1);
  UPDATE runs SET """ + _RUN_MOVES + """, cursor_step = it->>'n_step', cursor_attempt = n
    WHERE id = it->>'run'
    RETURNING * INTO r;
""" + _USAGE + """
  RETURN jsonb_build_object('s', 'ok', 'n', n, 'r', """ + _CHANGING + """);
END $$;
"""

END = """
CREATE FUNCTION sealflow_hot_end(it JSONB) RETURNS JSONB LANGUAGE plpgsql AS $$
DECLARE
  f RECORD;
  r RECORD;
BEGIN
""" + _FENCE + """
  -- what only the shared code settles: slots to give back, waiting lists to leave, a fan-out to close
  IF EXISTS (SELECT 1 FROM slot_holders WHERE run_id = it->>'run')
     OR EXISTS (SELECT 1 FROM slot_waiters WHERE run_id = it->>'run')
     OR EXISTS (SELECT 1 FROM fanouts WHERE run_id = it->>'run' AND state <> 'closed') THEN
    RETURN jsonb_build_object('s', 'general');
  END IF;
""" + _STEP_END + """
  DELETE FROM timers WHERE run_id = it->>'run';
  DELETE FROM outbox WHERE run_id = it->>'run';
  UPDATE runs SET state = it->>'r_state', """ + _RUN_MOVES + """
    WHERE id = it->>'run'
    RETURNING * INTO r;
""" + _USAGE + """
  RETURN jsonb_build_object('s', 'ok', 'r', """ + _CHANGING + """);
END $$;
"""

CLAIM = """
CREATE FUNCTION sealflow_hot_claim(it JSONB) RETURNS JSONB LANGUAGE plpgsql AS $$
DECLARE
  a RECORD;
  r RECORD;
  was TEXT;
  now_ DOUBLE PRECISION := (it->>'now')::DOUBLE PRECISION;
BEGIN
  SELECT * INTO a FROM attempts WHERE run_id = it->>'run' AND step_id = it->>'step' AND attempt = (it->>'att')::BIGINT;
  SELECT * INTO r FROM runs WHERE id = it->>'run';
  -- a refusal (audited), a timer's attempt, a run not plainly queued or running: the shared way
  IF a.run_id IS NULL OR r.id IS NULL OR a.token IS DISTINCT FROM (it->>'tok')::BIGINT OR a.state <> 'scheduled'
     OR r.state NOT IN ('queued', 'running') OR r.tenant IS DISTINCT FROM it->>'tenant' THEN
    RETURN jsonb_build_object('s', 'general');
  END IF;
  was := r.state;
  UPDATE attempts SET state = 'running', token = token + 1, lease_owner = it->>'owner',
      lease_expires = now_ + lease_ms::DOUBLE PRECISION / 1000.0::DOUBLE PRECISION,
      started_at = COALESCE(started_at, now_)
    WHERE run_id = a.run_id AND step_id = a.step_id AND attempt = a.attempt
    RETURNING * INTO a;
  DELETE FROM outbox WHERE run_id = a.run_id AND step_id = a.step_id AND attempt = a.attempt;
  IF was = 'queued' THEN
    UPDATE runs SET state = 'running', rev = rev + 1, updated_at = now_ WHERE id = r.id RETURNING * INTO r;
  END IF;
  RETURN jsonb_build_object('s', 'ok', 'was', was,
    'a', jsonb_build_array(a.run_id, a.step_id, a.attempt, a.try_no, a.state, a.token, a.lease_owner,
      a.lease_expires, a.lease_ms, a.scheduled_at, a.started_at, a.ended_at, a.due_at, a.output, a.error_class,
      a.error_message, a.data, a.leases_lost),
    'r', jsonb_build_array(r.id, r.tenant, r.workflow, r.workflow_version, r.plan_digest, r.input, r.state, r.rev,
      r.initiator, r.idempotency_key, r.input_hash, r.created_at, r.updated_at, r.deadline, r.output, r.error_class,
      r.error_message, r.steps_executed, r.tokens, r.cost_usd, r.tool_calls, r.redrives, r.cursor_step,
      r.cursor_attempt, r.priority, r.acting_as, r.access_mode, r.signer, r.parent_run_id, r.parent_step_id,
      r.parent_attempt, r.item_index, r.item));
END $$;
"""

SUBMIT = """
CREATE FUNCTION sealflow_hot_submit(it JSONB) RETURNS JSONB LANGUAGE plpgsql AS $$
DECLARE
  now_ DOUBLE PRECISION := (it->>'now')::DOUBLE PRECISION;
BEGIN
  -- a key used before: the shared way gives that run back, or refuses a different input
  IF it->>'ikey' IS NOT NULL AND EXISTS (SELECT 1 FROM runs WHERE tenant = it->>'tenant'
      AND workflow = it->>'workflow' AND idempotency_key = it->>'ikey') THEN
    RETURN jsonb_build_object('s', 'general');
  END IF;
  IF it->>'plan' IS NOT NULL THEN
    INSERT INTO plans (digest, workflow, version, body, created_at)
      VALUES (it->>'digest', it->>'workflow', (it->>'version')::BIGINT, it->>'plan', now_) ON CONFLICT DO NOTHING;
  END IF;
  INSERT INTO runs (id, tenant, workflow, workflow_version, plan_digest, input, state, rev, initiator, idempotency_key,
      input_hash, created_at, updated_at, deadline, cursor_step, cursor_attempt, priority, acting_as, access_mode,
      signer)
    VALUES (it->>'id', it->>'tenant', it->>'workflow', (it->>'version')::BIGINT, it->>'digest', it->>'input', 'queued',
      1, it->>'initiator', it->>'ikey', it->>'ihash', now_, now_, (it->>'deadline')::DOUBLE PRECISION, it->>'first',
      1, it->>'priority', it->>'acting', it->>'access', it->>'signer');
  IF it->>'deadline' IS NOT NULL THEN
    INSERT INTO timers (run_id, kind, fire_at) VALUES (it->>'id', 'run_deadline', (it->>'deadline')::DOUBLE PRECISION);
  END IF;
  INSERT INTO attempts (run_id, step_id, attempt, try_no, state, token, lease_ms, scheduled_at, due_at, data, seq)
    VALUES (it->>'id', it->>'first', 1, 1, 'scheduled', (it->>'tok')::BIGINT, (it->>'lms')::BIGINT, now_, now_,
      NULL, 1);
  INSERT INTO outbox (run_id, step_id, attempt, token, due_at, sent_at)
    VALUES (it->>'id', it->>'first', 1, (it->>'tok')::BIGINT, now_, NULL);
  RETURN jsonb_build_object('s', 'ok');
END $$;
"""

BATCH = """
CREATE FUNCTION sealflow_hot_batch(p_items JSONB) RETURNS SETOF JSONB LANGUAGE plpgsql AS $$
DECLARE
  it JSONB;
  got JSONB;
  events JSONB := '[]';
BEGIN
  -- the writers' lock, held to this transaction's end; each statement below then reads what every earlier
  -- writer committed (READ COMMITTED: a snapshot per statement)
  PERFORM pg_advisory_xact_lock(@WRITERS_KEY@);
  FOR it IN SELECT v FROM jsonb_array_elements(p_items) WITH ORDINALITY AS x(v, k) ORDER BY k LOOP
    BEGIN  -- this item alone: undone should any of its statements fail (answered, never raised)
      got := CASE it->>'k'
        WHEN 'carry' THEN sealflow_hot_carry(it)
        WHEN 'end' THEN sealflow_hot_end(it)
        WHEN 'claim' THEN sealflow_hot_claim(it)
        WHEN 'submit' THEN sealflow_hot_submit(it)
      END;
    EXCEPTION WHEN OTHERS THEN
      got := jsonb_build_object('s', 'error', 'e', SQLSTATE || ' ' || SQLERRM);
    END;
    IF got->>'s' = 'ok' THEN  -- its events, chained below with the other written items'
      events := events || CASE WHEN got->>'was' = 'running' THEN it->'ev_r' ELSE it->'ev' END;
    END IF;
    RETURN NEXT got;
  END LOOP;
  IF jsonb_array_length(events) > 0 THEN
    PERFORM sealflow_chain_link(events);
  END IF;
END $$;
""".replace("@WRITERS_KEY@", str(WRITERS_KEY))

#: PostgreSQL migration 19's part of the hot path (after :mod:`.chainlink`'s, which it calls)
FUNCTIONS = CARRY + END + CLAIM + SUBMIT + BATCH
CALL = "SELECT * FROM sealflow_hot_batch(%s::jsonb)"
