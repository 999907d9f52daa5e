-- the floor: two prepared statements that do nothing, the least any lock
-- cycle of two statements (take, release) can cost in PostgreSQL
\set k random(1, 100000)
SELECT :k::int;
SELECT :k::int;
