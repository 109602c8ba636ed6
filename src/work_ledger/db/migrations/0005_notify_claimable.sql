-- Long-poll wake-ups (DESIGN §5, §6): a unit that becomes ready notifies `wl_claimable`
-- (payload: its domain); a question opened or closed notifies `wl_question` (payload:
-- `<status>:<id>`). Each API process keeps one listening connection and wakes its
-- waiting clients from it. Notifications are sent at commit, so a woken waiter sees the
-- change; identical payloads within one transaction are delivered once.

CREATE FUNCTION wl_notify_claimable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('wl_claimable', NEW.domain);
    RETURN NULL;
END
$$;

CREATE TRIGGER work_units_notify_registered
    AFTER INSERT ON work_units
    FOR EACH ROW WHEN (NEW.state = 'ready')
    EXECUTE FUNCTION wl_notify_claimable();

CREATE TRIGGER work_units_notify_ready
    AFTER UPDATE OF state ON work_units
    FOR EACH ROW WHEN (NEW.state = 'ready' AND OLD.state <> 'ready')
    EXECUTE FUNCTION wl_notify_claimable();

CREATE FUNCTION wl_notify_question() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('wl_question', NEW.status::text || ':' || NEW.id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER blocking_questions_notify_opened
    AFTER INSERT ON blocking_questions
    FOR EACH ROW
    EXECUTE FUNCTION wl_notify_question();

CREATE TRIGGER blocking_questions_notify_closed
    AFTER UPDATE OF status ON blocking_questions
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION wl_notify_question();
