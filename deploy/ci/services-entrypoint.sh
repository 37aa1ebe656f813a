#!/bin/sh
# What the official images do at start, reduced to what the fleet uses. The server is exec'd
# so that it is PID 1 and gets the stop signal itself (Redis flushes its AOF, PostgreSQL
# shuts down cleanly).
#
#   redis-server ARGS   as the `redis` image: every address, no protected mode (the
#                       container's network is the boundary), files in /data
#   postgres ARGS       as the `postgres` image: POSTGRES_USER / POSTGRES_PASSWORD /
#                       POSTGRES_DB initialise $PGDATA once; password auth from other hosts
set -eu
case "${1:-}" in
redis-server)
  shift
  exec redis-server --bind "* -::*" --protected-mode no --dir /data "$@"
  ;;
postgres)
  shift
  : "${POSTGRES_USER:=postgres}" "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
  : "${POSTGRES_DB:=$POSTGRES_USER}"
  as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
  chown -R postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    chown postgres "$pwfile"
    as_postgres initdb -D "$PGDATA" --username="$POSTGRES_USER" --pwfile="$pwfile" \
      --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    as_postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    if [ "$POSTGRES_DB" != "postgres" ]; then
      as_postgres psql -v ON_ERROR_STOP=1 --username="$POSTGRES_USER" --dbname=postgres \
        -c "CREATE DATABASE \"$POSTGRES_DB\"" >/dev/null
    fi
    as_postgres pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  fi
  exec setpriv --reuid=postgres --regid=postgres --init-groups \
    postgres -D "$PGDATA" -c listen_addresses='*' "$@"
  ;;
esac
exec "$@"
