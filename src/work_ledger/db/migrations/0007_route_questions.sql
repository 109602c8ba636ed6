-- Triage's half of the question loop (DESIGN §2: triage polls open questions, routes each
-- into the human queue, writes the answer back). A question is routed once: triage records
-- the id of the human queue's item in external_task_id, and the database keeps it there.
-- The sixth view shows how long units wait on people.

-- The event a routing appends. Added here and first used by a later transaction, as
-- PostgreSQL requires of a new enum value.
ALTER TYPE work_event_type ADD VALUE 'routed';

ALTER TABLE blocking_questions
    ADD CONSTRAINT question_external_task_id_bounded
        CHECK (length(external_task_id) BETWEEN 1 AND 256);

-- Set once, and only while the question is open: a second triage worker (or one that
-- restarted) cannot route it again under another id, and a question nobody waits on any
-- more is not sent to a human. (A closed question never changes at all: question_status_final.)
CREATE FUNCTION wl_guard_question_route() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.external_task_id IS NOT NULL
       AND NEW.external_task_id IS DISTINCT FROM OLD.external_task_id THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'question_routed_once',
            MESSAGE = format('question %s is already routed as %s; a question is routed once',
                             OLD.id, OLD.external_task_id),
            HINT = 'keep the existing external task; close any duplicate you created for it';
    END IF;
    IF NEW.external_task_id IS NOT NULL AND OLD.external_task_id IS NULL
       AND NEW.status <> 'open' THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation',
            CONSTRAINT = 'question_routed_while_open',
            MESSAGE = format('question %s is %s; only an open question is routed',
                             OLD.id, NEW.status),
            HINT = 'nobody waits on it any more: close the external task you created for it';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER question_routed_once
    BEFORE UPDATE OF external_task_id ON blocking_questions
    FOR EACH ROW EXECUTE FUNCTION wl_guard_question_route();

-- A routing wakes long-polls of GET /questions (routed or not) as an opened question does
-- (payload `open:<id>`, see 0005); a waiter on the question itself waits for its closing.
CREATE TRIGGER blocking_questions_notify_routed
    AFTER UPDATE OF external_task_id ON blocking_questions
    FOR EACH ROW WHEN (OLD.external_task_id IS DISTINCT FROM NEW.external_task_id)
    EXECUTE FUNCTION wl_notify_question();

CREATE VIEW v_question_wait WITH (security_barrier) AS
WITH q AS (
    SELECT q.assignee_group_slug, u.domain, q.status, q.external_task_id,
           extract(epoch FROM now() - q.created_at)::float8 AS open_seconds,
           extract(epoch FROM q.closed_at - q.created_at)::float8 AS answer_seconds
    FROM blocking_questions AS q JOIN work_units AS u ON u.id = q.unit_id
)
SELECT CASE WHEN grouping(domain) = 0 THEN 'domain'
            WHEN grouping(assignee_group_slug) = 0 THEN 'group'
            ELSE 'total' END AS scope,
       CASE WHEN grouping(domain) = 1 THEN '(all)' ELSE domain END AS domain,
       CASE WHEN grouping(assignee_group_slug) = 1 THEN '(all)' ELSE assignee_group_slug END
           AS assignee_group_slug,
       count(*) FILTER (WHERE status = 'open') AS open_questions,
       count(*) FILTER (WHERE status = 'open' AND external_task_id IS NULL)
           AS unrouted_questions,
       coalesce(floor(max(open_seconds) FILTER (WHERE status = 'open')), 0)::bigint
           AS oldest_open_seconds,
       floor(percentile_cont(0.5) WITHIN GROUP (ORDER BY open_seconds)
             FILTER (WHERE status = 'open'))::bigint AS open_p50_seconds,
       count(*) FILTER (WHERE status = 'answered') AS answered_questions,
       round((percentile_cont(0.5) WITHIN GROUP (ORDER BY answer_seconds)
              FILTER (WHERE status = 'answered'))::numeric, 1) AS answer_p50_seconds,
       round((percentile_cont(0.9) WITHIN GROUP (ORDER BY answer_seconds)
              FILTER (WHERE status = 'answered'))::numeric, 1) AS answer_p90_seconds,
       count(*) FILTER (WHERE status = 'cancelled') AS cancelled_questions
FROM q
GROUP BY GROUPING SETS ((assignee_group_slug), (domain), ())
ORDER BY grouping(domain), grouping(assignee_group_slug), domain, assignee_group_slug;
COMMENT ON VIEW v_question_wait IS
    'How long units wait on people. Per assignee group (scope group, domain (all)), per '
    'domain of the unit (scope domain, assignee_group_slug (all)) and over everything (scope '
    'total, always present): open questions (= blocked units), how many are not routed to '
    'the human queue yet, the oldest open one''s age (0 when none is open) and the median '
    'open age; answered questions and the time from asking to answer, p50 and p90 (seconds).';

-- The reader role reads the new view too: grant-reader from now on (wrapping the 0004
-- function, which keeps granting the five), and every role already made by it, now.
ALTER FUNCTION wl_grant_reader(text, text) RENAME TO wl_grant_reader_0004;

CREATE FUNCTION wl_grant_reader(role_name text, password_verifier text) RETURNS text[]
    LANGUAGE plpgsql AS $$
BEGIN
    RETURN wl_grant_reader_0004(role_name, password_verifier)
           || wl_grant_views(role_name, ARRAY['v_question_wait']);
END $$;
REVOKE EXECUTE ON FUNCTION wl_grant_reader(text, text) FROM PUBLIC;

CREATE FUNCTION wl_grant_views(role_name text, views text[]) RETURNS text[]
    LANGUAGE plpgsql AS $$
DECLARE
    view_name text;
BEGIN
    FOREACH view_name IN ARRAY views LOOP
        EXECUTE format('GRANT SELECT ON %I TO %I', view_name, role_name);
    END LOOP;
    RETURN views;
END $$;
REVOKE EXECUTE ON FUNCTION wl_grant_views(text, text[]) FROM PUBLIC;

DO $$
DECLARE
    reader text;
BEGIN
    FOR reader IN
        SELECT DISTINCT r.rolname
        FROM pg_class AS c
        CROSS JOIN LATERAL aclexplode(c.relacl) AS acl
        JOIN pg_roles AS r ON r.oid = acl.grantee
        WHERE c.oid = 'v_queue_depth'::regclass AND acl.privilege_type = 'SELECT'
          AND acl.grantee <> c.relowner
    LOOP
        PERFORM wl_grant_views(reader, ARRAY['v_question_wait']);
    END LOOP;
END $$;
