-- The fold notes today's agents of the running attempts that began before today only.
--
-- 0023's wl_running_agents_today listed every running attempt's agent, and each fold (every
-- second) tried to add each one to today's agents, though an attempt begun today was noted
-- for today by its claim already (wl_note_attempt_started). Every one but the first was a
-- conflict: with 8,125 attempts running (bench's claim+start, which leaves each unit in
-- progress), the fold's day-notes statement joined them all to their units and probed
-- wl_daily_agents 16,250 times, 87 of the fold's 141 ms, each second.
--
-- Only an attempt begun on an earlier day still needs the fold, to be counted on the days
-- it runs through while it runs (its end notes every day it ran). Those are the view now.
-- One that commits its claim after the first fold of a new day, though begun the day
-- before, is still running and begun before today at the next fold: nothing is missed.
CREATE OR REPLACE VIEW wl_running_agents_today AS
SELECT wl_utc_day(now()) AS day, u.domain, a.agent_id
FROM work_unit_attempts AS a
JOIN work_units AS u ON u.id = a.unit_id
WHERE a.outcome IS NULL AND wl_utc_day(a.started_at) < wl_utc_day(now());

