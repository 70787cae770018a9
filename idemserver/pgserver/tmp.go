package pgserver

import _ "github.com/jackc/pgx/v5/pgxpool"
