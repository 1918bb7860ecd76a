-- Executed once by the postgres image on an empty volume (docker-entrypoint-initdb.d).
-- One database per service (and one for the saga monitor), matching DATABASE_URL in
-- infra/docker-compose.yml.
CREATE DATABASE task_svc;
CREATE DATABASE label_svc;
CREATE DATABASE qa_svc;
CREATE DATABASE billing_svc;
CREATE DATABASE saga_monitor;
