#!/usr/bin/env bash
# Start the real services the database suites and CI use, on their usual loopback ports:
#   PostgreSQL  127.0.0.1:5432  trust auth for local connections, database `test`
#   MariaDB     127.0.0.1:3306  root without password, database `test`
#   Redis       127.0.0.1:6379
# Installs what is missing from Debian's packages (as root, with apt-get), starts what is not
# answering yet, and waits until each answers. Idempotent: a service that already answers is
# left alone, so running it twice starts nothing twice. `make test` and `make demo` need none of
# these (SQLite and an embedded Redis); CI (.ci/run) calls this script first.
#
#   scripts/services.sh            # all three
#   scripts/services.sh redis      # only the ones named (postgres, mariadb, redis)
#   scripts/services.sh test-tools # Chromium, the SQLite JDBC driver, JDK 17, Maven, promtool (no
#                                  # service; CI's suites and the RocketMQ lab)
#
# A private instance instead of the shared one (the soak, bench/soak, restarts its own):
#   scripts/services.sh --port 5441 --data DIR postgres   # a cluster of its own in DIR (initdb
#                                  # when DIR holds none; owned by `postgres` when run as root),
#                                  # trust auth, database `test`, socket in DIR
#   scripts/services.sh --port 6391 --data DIR redis      # redis-server on that port, pid and
#                                  # log files in DIR
#   scripts/services.sh --port P --data DIR --stop postgres|redis   # stop it the hard way
#                                  # (`pg_ctl stop -m immediate`; SIGKILL to Redis): a crash
set -euo pipefail

log() { printf '[services] %s\n' "$*"; }
die() { printf '[services] error: %s\n' "$*" >&2; exit 1; }

answers() {  # answers PORT: something accepts TCP connections on 127.0.0.1:PORT
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

wait_for() {  # wait_for NAME CHECK-COMMAND...: up to 60 s
    local name=$1; shift
    for _ in $(seq 1 120); do
        if "$@" >/dev/null 2>&1; then log "$name answers"; return 0; fi
        sleep 0.5
    done
    die "$name did not answer within 60 s"
}

APT_UPDATED=0
apt_install() {  # apt_install PACKAGE...: installs the packages that are not installed yet
    local missing=()
    for package in "$@"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
            || missing+=("$package")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
    [ "$(id -u)" -eq 0 ] || die "missing ${missing[*]}: run as root (apt-get install) or install them"
    if [ "$APT_UPDATED" -eq 0 ]; then
        log "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
        APT_UPDATED=1
    fi
    log "installing ${missing[*]}"
    # policy-rc.d would stop a package from starting its service; we start them ourselves
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        >/dev/null
}

start_postgres() {
    if answers 5432 && psql -h 127.0.0.1 -U postgres -d test -Atc 'select 1' >/dev/null 2>&1; then
        log "postgresql already answers with database test"; return 0
    fi
    apt_install postgresql
    local version
    version=$(ls /usr/lib/postgresql | sort -V | tail -1)
    local hba="/etc/postgresql/$version/main/pg_hba.conf"
    if [ -f "$hba" ] && ! grep -q '^# postbox: trust' "$hba"; then
        log "postgresql: trust auth for local connections ($hba)"
        {
            echo '# postbox: trust local connections (tests and CI only)'
            echo 'local all all trust'
            echo 'host all all 127.0.0.1/32 trust'
            echo 'host all all ::1/128 trust'
            cat "$hba"
        } > "$hba.new" && mv "$hba.new" "$hba"
    fi
    if ! answers 5432; then
        log "starting postgresql $version"
        pg_ctlcluster "$version" main start || service postgresql start
    else
        pg_ctlcluster "$version" main reload || true
    fi
    wait_for postgresql psql -h 127.0.0.1 -U postgres -d postgres -Atc 'select 1'
    if ! psql -h 127.0.0.1 -U postgres -d postgres -Atc \
            "select 1 from pg_database where datname = 'test'" | grep -q 1; then
        psql -h 127.0.0.1 -U postgres -d postgres -qc 'create database test'
        log "postgresql: created database test"
    fi
}

mariadb_root_ok() {
    mariadb -h 127.0.0.1 -P 3306 -u root -e 'select 1' test >/dev/null 2>&1
}

start_mariadb() {
    if answers 3306 && mariadb_root_ok; then
        log "mariadb already answers with database test"; return 0
    fi
    apt_install mariadb-server mariadb-client
    if ! answers 3306; then
        log "starting mariadb"
        mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
        service mariadb start >/dev/null 2>&1 || {
            (mysqld_safe --bind-address=127.0.0.1 --port=3306 >/dev/null 2>&1 &)
        }
    fi
    wait_for mariadb mariadb -u root -e 'select 1'   # the root socket login works first
    mariadb -u root <<'SQL'
CREATE DATABASE IF NOT EXISTS test;
ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket;
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
FLUSH PRIVILEGES;
SQL
    wait_for "mariadb (root over TCP)" mariadb_root_ok
}

install_test_tools() {  # not services: what some suites need on the machine
    # the reconciliation's report test renders in headless Chromium; its JDBC test reads SQLite
    # through Debian's JDBC driver; the RocketMQ compatibility lab (docs/compat-lab.md) needs a
    # JDK and Maven (it fetches RocketMQ from Maven Central itself); the alert rules' test runs
    # promtool, from Debian's prometheus package (its server is never started here)
    apt_install chromium libxerial-sqlite-jdbc-java openjdk-17-jdk-headless maven prometheus
    log "chromium, the SQLite JDBC driver, a JDK, Maven and promtool are installed"
}

PORT=""
DATA=""
STOP=0
PG_BIN=""

pg_bin() {  # the newest Debian PostgreSQL's binaries (installed when missing)
    apt_install postgresql
    PG_BIN="/usr/lib/postgresql/$(ls /usr/lib/postgresql | sort -V | tail -1)/bin"
}

as_postgres() {  # as_postgres COMMAND...: as the `postgres` user when root (it refuses root)
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start_postgres_instance() {  # a private cluster in $DATA on $PORT
    pg_bin
    mkdir -p "$DATA"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$DATA" && chmod 700 "$DATA"
    if [ ! -f "$DATA/PG_VERSION" ]; then
        log "postgresql: initdb in $DATA"
        as_postgres "$PG_BIN/initdb" -D "$DATA" -A trust -U postgres >/dev/null
    fi
    if ! answers "$PORT"; then
        log "starting postgresql in $DATA on port $PORT"
        as_postgres "$PG_BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 start \
            -o "-p $PORT -k $DATA -c listen_addresses=127.0.0.1 -c max_connections=200" \
            >/dev/null
    fi
    wait_for postgresql psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -Atc 'select 1'
    if ! psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -Atc \
            "select 1 from pg_database where datname = 'test'" | grep -q 1; then
        psql -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qc 'create database test'
    fi
}

stop_postgres_instance() {
    pg_bin
    as_postgres "$PG_BIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null 2>&1 || true
    log "postgresql in $DATA stopped (immediate)"
}

start_redis_instance() {  # redis-server on $PORT, its pid and log in $DATA
    apt_install redis-server
    mkdir -p "$DATA"
    if ! answers "$PORT"; then
        log "starting redis on port $PORT"
        redis-server --bind 127.0.0.1 --port "$PORT" --daemonize yes --save '' \
            --appendonly no --dir "$DATA" --pidfile "$DATA/redis.pid" \
            --logfile "$DATA/redis.log"
    fi
    wait_for redis sh -c "redis-cli -h 127.0.0.1 -p $PORT ping | grep -q PONG"
}

stop_redis_instance() {
    if [ -f "$DATA/redis.pid" ]; then
        kill -9 "$(cat "$DATA/redis.pid")" 2>/dev/null || true
        rm -f "$DATA/redis.pid"
    fi
    for _ in $(seq 1 100); do answers "$PORT" || break; sleep 0.1; done
    log "redis on port $PORT stopped (SIGKILL)"
}

instance() {  # instance SERVICE: the private instance given by --port/--data, started or stopped
    [ -n "$PORT" ] && [ -n "$DATA" ] || die "--port and --data go together"
    local verb=start
    [ "$STOP" -eq 1 ] && verb=stop
    case "$1" in
        postgres|postgresql) "${verb}_postgres_instance" ;;
        redis) "${verb}_redis_instance" ;;
        *) die "--port/--data: postgres or redis, not $1" ;;
    esac
}

start_redis() {
    if answers 6379 && redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; then
        log "redis already answers"; return 0
    fi
    apt_install redis-server
    if ! answers 6379; then
        log "starting redis"
        redis-server --bind 127.0.0.1 --port 6379 --daemonize yes --save '' --appendonly no \
            --dir /tmp --logfile /tmp/postbox-redis.log
    fi
    wait_for redis sh -c 'redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG'
}

main() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --port) PORT=$2; shift 2 ;;
            --data) DATA=$(realpath -m "$2"); shift 2 ;;
            --stop) STOP=1; shift ;;
            *) break ;;
        esac
    done
    if [ -n "$PORT$DATA" ] || [ "$STOP" -eq 1 ]; then
        [ $# -eq 1 ] || die "--port/--data/--stop take one service (postgres or redis)"
        instance "$1"
        return
    fi
    local wanted=("$@")
    [ ${#wanted[@]} -eq 0 ] && wanted=(postgres mariadb redis)
    for service in "${wanted[@]}"; do
        case "$service" in
            postgres|postgresql) start_postgres ;;
            mariadb|mysql) start_mariadb ;;
            redis) start_redis ;;
            test-tools) install_test_tools ;;
            *) die "unknown service $service (postgres, mariadb, redis, test-tools)" ;;
        esac
    done
}

main "$@"
