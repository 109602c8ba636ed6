-- The words of DESIGN §12 (the shape of the work and its money): a unit that exists but
-- may not be claimed yet (`waiting`), an attempt that handed its unit back as children
-- (`split`), and the events of a split and of a waived requirement. Added alone, since
-- PostgreSQL lets a new enum value be used only by a later transaction (0011 uses them).
ALTER TYPE work_state ADD VALUE 'waiting' AFTER 'ready';
ALTER TYPE attempt_outcome ADD VALUE 'split';
ALTER TYPE work_event_type ADD VALUE 'split';
ALTER TYPE work_event_type ADD VALUE 'waived';
