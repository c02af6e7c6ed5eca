"""Airlock settings: every value from the environment, with a development default.

Without ``DATABASE_URL`` / ``REDIS_URL`` Airlock runs embedded: SQLite (WAL),
a filesystem Celery broker and a database channel layer, no external server.
With them it scales out on PostgreSQL and Redis.

Each variable is documented where it is read, in ``#: names | default | meaning``
rows (going on over ``#:   `` lines): the site's settings reference is made of
them (``docs/hooks.py``), and a test fails when a variable read is not here.
"""

import socket
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from console.environment import (
    data_dir,
    derived_key,
    env,
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_targets,
    secret_key_file,
)

BASE_DIR = Path(__file__).resolve().parent.parent


# Off unless asked for: the embedded deployment is what people run, and a debug
# page shows a stranger the code and settings (it also records every query).
#: `DEBUG` | `false` | Django debug mode (error pages with code and settings; every query
#:   recorded): for development only
DEBUG = env_bool("DEBUG", False)
#: `AIRLOCK_DATA_DIR` | `./var` | SQLite database, broker folders, beat schedule, secret key;
#:   readable by Airlock's user alone (0700)
#:   never inside a git work tree unless ignored there (start-up refuses it)
DATA_DIR = data_dir("AIRLOCK_DATA_DIR", BASE_DIR / "var")
# Without SECRET_KEY an embedded install keeps a key of its own in the data
# dir; the scale deployment (DATABASE_URL) has several hosts that must share one.
#: `SECRET_KEY` | a key made for this install in `$AIRLOCK_DATA_DIR/secret_key` (0600); required
#:   with `DATABASE_URL` (every host shares it) | signs sessions and keys the audit chain
#: `DATABASE_URL` | — | e.g. `postgres://user:pw@host:5432/airlock`; switches off SQLite
SECRET_KEY = env("SECRET_KEY") or (
    secret_key_file(DATA_DIR) if DEBUG or not env("DATABASE_URL") else ""
)
if not SECRET_KEY:
    raise ImproperlyConfigured(
        "SECRET_KEY must be set with DATABASE_URL: every host of a deployment signs with it"
    )
#: `AIRLOCK_CREDENTIALS_KEY` | derived from `SECRET_KEY` | Fernet key(s) sealing the originals of
#:   credentials masked in proposals (comma-separated: the first seals, each opens)
CREDENTIALS_KEY = env("AIRLOCK_CREDENTIALS_KEY") or derived_key(SECRET_KEY)
#: `SITE_URL` | the address `serve` listens on (`http://localhost:8000` elsewhere) | the address
#:   people reach the console at: links in notifications, and what the hosts, origins and cookies
#:   below follow; `https://…` turns on secure cookies, HSTS and the redirect to HTTPS
SITE_URL = env("SITE_URL", "http://localhost:8000").rstrip("/")
#: `WORKER_HOSTNAME` | the host name | names the `host.<name>` queue for host actions
WORKER_HOSTNAME = env("WORKER_HOSTNAME", socket.gethostname())
#: `METRICS_TOKEN` | — | when set, `/metrics` requires this bearer token
METRICS_TOKEN = env("METRICS_TOKEN")
#: `OTEL_EXPORTER_OTLP_ENDPOINT` | — | an OTLP/HTTP receiver of traces, e.g.
#:   `http://collector:4318`: each process sends a trace per proposal there (the SDK's other
#:   `OTEL_*` variables apply: `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_SCHEDULE_DELAY`, …);
#:   unset, nothing of OpenTelemetry is loaded
TRACES_ENDPOINT = env("OTEL_EXPORTER_OTLP_ENDPOINT")


def site_origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of ``SITE_URL``, refused at start-up when it is not an http(s) URL."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        raise ImproperlyConfigured(
            f"SITE_URL={url!r} must be the console's address, like https://airlock.example.com"
        )
    return parts.scheme, parts.hostname, port


# Serving: the hosts, origins and cookies follow from SITE_URL, the address
# people and links use, unless set one by one.
SITE_SCHEME, SITE_HOST, SITE_PORT = site_origin(SITE_URL)
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
SITE_IS_LOOPBACK = SITE_HOST in LOOPBACK_HOSTS
#: `ALLOWED_HOSTS` | `SITE_URL`'s host (and the loopback names when it is this machine; `*` when
#:   `serve --host 0.0.0.0` runs without `SITE_URL`) | comma-separated host names
ALLOWED_HOSTS = env_list(
    "ALLOWED_HOSTS",
    ["localhost", "127.0.0.1", "[::1]"] if SITE_IS_LOOPBACK else [SITE_HOST],
)
#: `CSRF_TRUSTED_ORIGINS` | — | comma-separated origins for a console behind a proxy
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# A browser's websocket names the page's origin: one of these, or (a console
# on this machine) any loopback address. A client that sends no Origin is not
# a browser and carries its own credentials. See console/ws_auth.py.
#: `WEBSOCKET_ALLOWED_ORIGINS` | `SITE_URL`'s origin | comma-separated origins whose pages may open
#:   the live websockets with a session cookie (this machine's own always may when `SITE_URL` is this
#:   machine; a client that sends no `Origin` authenticates with its token)
WEBSOCKET_ALLOWED_ORIGINS = (
    env_list("WEBSOCKET_ALLOWED_ORIGINS", [f"{SITE_SCHEME}://{urlsplit(SITE_URL).netloc}"])
    + CSRF_TRUSTED_ORIGINS
)
WEBSOCKET_LOOPBACK_ORIGINS = SITE_IS_LOOPBACK
#: `SECURE_PROXY_SSL_HEADER` | — | behind a proxy that ends TLS, the header it sets:
#:   `X-Forwarded-Proto: https`
if env("SECURE_PROXY_SSL_HEADER"):
    _header, _, _value = env("SECURE_PROXY_SSL_HEADER").partition(":")
    if not _value.strip():
        raise ImproperlyConfigured(
            "SECURE_PROXY_SSL_HEADER must be 'Header-Name: value', e.g. 'X-Forwarded-Proto: https'"
        )
    SECURE_PROXY_SSL_HEADER = (
        "HTTP_" + _header.strip().upper().replace("-", "_"),
        _value.strip(),
    )
SECURE_TLS = SITE_SCHEME == "https"
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", SECURE_TLS)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", SECURE_TLS)
#: `SECURE_SSL_REDIRECT` / `SESSION_COOKIE_SECURE` / `CSRF_COOKIE_SECURE` | `true` with an https
#:   `SITE_URL` | redirect plain HTTP, send cookies over HTTPS only
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", SECURE_TLS)
#: `SECURE_HSTS_SECONDS` / `SECURE_HSTS_INCLUDE_SUBDOMAINS` / `SECURE_HSTS_PRELOAD` | a year /
#:   `true` / `true` with an https `SITE_URL`, else off | Strict-Transport-Security
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if SECURE_TLS else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", SECURE_TLS)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", SECURE_TLS)
SECURE_REDIRECT_EXEMPT = [r"^livez$"]  # a load balancer's probe on the plain port
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
# The console's pages run only the scripts and styles it serves itself: no
# inline script or style, no eval (htmx's own style and eval are off).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
    }
}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "template_partials",
    "django_htmx",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "allauth",
    "allauth.account",
    "allauth.mfa",
    "allauth.socialaccount",
    "allauth.usersessions",
    "infrastructure",
    "console",
    "audit",
    "accounts",
    "accounts.sso",
    "executions",
    "approvals",
]

MIDDLEWARE = [
    "infrastructure.rest.errors.api_error_middleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "accounts.middleware.session_lifetime",
    "approvals.review.middleware.enrolment_required",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "console.urls"
ASGI_APPLICATION = "console.asgi.application"
WSGI_APPLICATION = "console.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.context_processors.shell",
            ],
        },
    }
]

# Database: SQLite (WAL) by default, anything dj-database-url reads otherwise.
DATABASE_URL = env("DATABASE_URL")
#: `DB_POOL_SIZE` | `20` | PostgreSQL connections per process (a pool; a burst waits for one)
#: `DB_POOL_TIMEOUT` | `30` | seconds a request waits for a pooled connection
#: `SQLITE_PATH` | `$AIRLOCK_DATA_DIR/airlock.sqlite3` | the embedded database file
#: `CONN_MAX_AGE` | `600` (SQLite) | seconds a request thread keeps its SQLite connection
#: `SQLITE_WAL_AUTOCHECKPOINT` | `1000`; `20000` under `serve` | log pages at which a commit copies
#:   SQLite's log back; `serve` does that itself beside the writers, this is its backstop
#: `SQLITE_TEST_PATH` | `$AIRLOCK_DATA_DIR/test.sqlite3` | the database file the test suite makes
#:   and removes
if DATABASE_URL:
    import dj_database_url

    DATABASES = {"default": dj_database_url.parse(DATABASE_URL)}
    DATABASES["default"].setdefault("TEST", {})
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        # A bounded pool per process: a burst of requests waits for a connection
        # (up to DB_POOL_TIMEOUT) instead of exceeding the server's max_connections.
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": env_int("DB_POOL_SIZE", 20, minimum=1),
            "timeout": env_int("DB_POOL_TIMEOUT", 30, minimum=1),
        }
        # Each connection is checked as it leaves the pool: after PostgreSQL
        # restarts, dead ones are replaced instead of failing a request each
        # (infrastructure/postgres: without a round trip while the server is quiet).
        DATABASES["default"]["ENGINE"] = "infrastructure.postgres"
        DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
else:
    DATABASES = {
        "default": {
            "ENGINE": "infrastructure.sqlite",  # Django's, with writers queued (see there)
            "NAME": env("SQLITE_PATH", str(DATA_DIR / "airlock.sqlite3")),
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": (
                    "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=30000; "
                    # serve checkpoints the log itself and sets a backstop here
                    # (infrastructure/sqlite/checkpoints.py); SQLite's default otherwise.
                    f"PRAGMA wal_autocheckpoint={env_int('SQLITE_WAL_AUTOCHECKPOINT', 1000, minimum=1)};"
                ),
            },
            "TEST": {"NAME": env("SQLITE_TEST_PATH", str(DATA_DIR / "test.sqlite3"))},
            # A thread keeps its connection (opening one costs more than a read).
            "CONN_MAX_AGE": env_int("CONN_MAX_AGE", 600, minimum=0),
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis: Celery broker and channel layer in the scale deployment.
#: `REDIS_URL` | — | e.g. `redis://host:6379/0`; Celery broker and Channels layer
REDIS_URL = env("REDIS_URL")
REDIS_CHANNEL_LAYER = "infrastructure.channel_layers.RedisPubSubLayer"
#: `CHANNEL_LAYER_PREFIX` | `asgi` | key prefix of the Channels layer in Redis (deployments sharing
#:   one Redis)
if REDIS_URL:
    # Redis pub/sub: one PUBLISH per group send (the list-based layer: four round trips
    # and a Lua script), and a Redis restart loses only the messages of its moment away
    # (the list-based layer lost every group). The database stays the truth.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": REDIS_CHANNEL_LAYER,
            "CONFIG": {
                "hosts": [REDIS_URL],
                # Deployments sharing one Redis keep their groups apart by prefix.
                "prefix": env("CHANNEL_LAYER_PREFIX", "asgi"),
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "infrastructure.channel_layers.DatabaseChannelLayer"}}

# The cache every process shares: sign-in rate limits and replayed ID tokens must
# be counted once for the whole deployment, not once per web process.
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": env("CHANNEL_LAYER_PREFIX", "asgi"),
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "airlock_cache",  # made by migrate (console.apps) and the test database
        }
    }

# (A host in the filesystem URL only keeps kombu from warning that it has none.)
#: `CELERY_BROKER_URL` | `REDIS_URL` or `filesystem://` | override the broker
CELERY_BROKER_URL = env("CELERY_BROKER_URL", REDIS_URL or "filesystem://localhost/")
CELERY_BROKER_TRANSPORT_OPTIONS = (
    {
        # No redelivery bookkeeping: kombu's emulated acks cost two Redis
        # round trips per task (one before it is handed to a thread, one as it
        # starts), to bring back after visibility_timeout (an hour) a message a
        # dead worker had taken but not started. Tasks are acknowledged as they
        # start anyway (CELERY_TASK_ACKS_LATE), and what such a message asked
        # for is done again sooner by the sweeper (a queued execution after
        # REQUEUE_AFTER_SECONDS) or the periodic tasks.
        "ack_emulation": False,
    }
    if REDIS_URL
    else {
        "data_folder_in": str(DATA_DIR / "broker"),
        "data_folder_out": str(DATA_DIR / "broker"),
        "processed_folder": str(DATA_DIR / "broker-processed"),
        "control_folder": str(DATA_DIR / "broker-control"),
        "store_processed": False,
        "polling_interval": 0.5,  # a safety net: producers ring the doorbell
    }
)
if CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT = "infrastructure.broker:Transport"  # atomic message files
#: `CELERY_TASK_ALWAYS_EAGER` | `false` | run tasks in the calling process instead of a worker
#:   (tests only: nothing is queued and no sandbox worker holds a session)
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_ACKS_LATE = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = "airlock"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Threads, not prefork: sandbox sessions live in the process that opened them,
# which consumes their queue (prefork would hand their executes to other children).
CELERY_WORKER_POOL = "threads"
#: `WORKER_CONCURRENCY` | `8` | threads of a `celery worker` process (`serve --concurrency` for the
#:   embedded one)
CELERY_WORKER_CONCURRENCY = env_int("WORKER_CONCURRENCY", 8, minimum=1, maximum=256)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# An enqueue happens after its transaction committed, in the request that approved:
# with the broker away it gives up within seconds (the sweeper enqueues the run
# later) instead of holding the request in Celery's retries.
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TASK_PUBLISH_RETRY_POLICY = dict(
    max_retries=1, interval_start=0, interval_step=0.5, interval_max=0.5
)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "console:home"  # the overview for admins, the queue for reviewers
LOGOUT_REDIRECT_URL = "login"

# Sign-in (django-allauth; see accounts/): a password, a provider's single
# sign-on, then a second factor (passkeys, TOTP, recovery codes), and a fresh
# factor again before a decision or change that matters (STEP_UP_*).
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
ACCOUNT_ADAPTER = "accounts.adapters.AccountAdapter"
SOCIALACCOUNT_ADAPTER = "accounts.sso.adapter.SocialAccountAdapter"
ACCOUNT_LOGIN_METHODS = {"username"}
ACCOUNT_SIGNUP_FIELDS = [
    "username*",
    "password1*",
]  # signing up is closed: accounts come from admins or SSO
ACCOUNT_EMAIL_VERIFICATION = "none"
ACCOUNT_SESSION_REMEMBER = True  # a session lasts SESSION_MAX_HOURS at most, idle or not
ACCOUNT_LOGOUT_REDIRECT_URL = "login"
ACCOUNT_LOGOUT_ON_PASSWORD_CHANGE = False
# Failed sign-ins (a wrong password or second factor) within five minutes after
# which the account, or the client address, is refused even the right one.
#: `SIGNIN_FAILURES_PER_ACCOUNT` / `SIGNIN_FAILURES_PER_ADDRESS` | `10` / `30` | failed sign-ins
#:   (passwords and second-factor codes) within five minutes after which an account / a client
#:   address is refused for a while, even the right password
SIGNIN_FAILURES_PER_ACCOUNT = env_int("SIGNIN_FAILURES_PER_ACCOUNT", 10, minimum=1, maximum=100)
SIGNIN_FAILURES_PER_ADDRESS = env_int("SIGNIN_FAILURES_PER_ADDRESS", 30, minimum=1, maximum=1000)
ACCOUNT_RATE_LIMITS = {
    "login_failed": f"{SIGNIN_FAILURES_PER_ADDRESS}/5m/ip,{SIGNIN_FAILURES_PER_ACCOUNT}/5m/key",
}
# Password sign-in on or off; off, the named break-glass admins still may.
#: `PASSWORD_SIGNIN` | `true` | `false`: password sign-in only for the `BREAK_GLASS_USERS` (single
#:   sign-on for everyone else)
PASSWORD_SIGNIN = env_bool("PASSWORD_SIGNIN", True)
#: `BREAK_GLASS_USERS` | — | comma-separated usernames who may sign in with a password when
#:   `PASSWORD_SIGNIN=false`
BREAK_GLASS_USERS = env_list("BREAK_GLASS_USERS", [])
MFA_SUPPORTED_TYPES = ["totp", "webauthn", "recovery_codes"]
MFA_PASSKEY_LOGIN_ENABLED = True
MFA_TOTP_ISSUER = "Airlock"
USERSESSIONS_TRACK_ACTIVITY = False  # a write per request; the sessions page needs none
#: `SESSION_IDLE_MINUTES` / `SESSION_MAX_HOURS` | `60` / `12` | a console session ends after this
#:   long idle / this long in all
SESSION_IDLE_MINUTES = env_int("SESSION_IDLE_MINUTES", 60, minimum=1)
SESSION_MAX_HOURS = env_int("SESSION_MAX_HOURS", 12, minimum=1)
SESSION_COOKIE_AGE = SESSION_MAX_HOURS * 3600
# A decision on a proposal of at least this risk (11: none), a policy change,
# a new token and a change of roles need a second factor this recent.
#: `WEBSOCKET_AUTH_CHECK_SECONDS` | `30` | how often an open live view checks that its session or
#:   token still signs someone in (closed, and the page back at sign-in, when not)
WEBSOCKET_AUTH_CHECK_SECONDS = env_int("WEBSOCKET_AUTH_CHECK_SECONDS", 30, minimum=1)
#: `STEP_UP_MIN_RISK` | `7` | deciding a proposal of this risk or more needs a fresh second factor
#:   (`11`: never for decisions; policy changes, tokens and roles always do)
STEP_UP_MIN_RISK = env_int("STEP_UP_MIN_RISK", 7, minimum=0, maximum=11)
#: `STEP_UP_SECONDS` | `300` | how recent that second factor must be
STEP_UP_SECONDS = env_int("STEP_UP_SECONDS", 300, minimum=30, maximum=86_400)


def oidc_provider(prefix: str, provider_id: str) -> dict:
    """One OpenID Connect provider from ``<prefix>ISSUER``, ``<prefix>CLIENT_ID`` and the rest."""
    issuer = env(f"{prefix}ISSUER").rstrip("/")
    client_id, secret = env(f"{prefix}CLIENT_ID"), env(f"{prefix}CLIENT_SECRET")
    if not (issuer and client_id and secret):
        raise ImproperlyConfigured(
            f"single sign-on through {provider_id!r} needs {prefix}ISSUER, {prefix}CLIENT_ID "
            f"and {prefix}CLIENT_SECRET"
        )
    if urlsplit(issuer).scheme not in ("https", "http"):
        raise ImproperlyConfigured(f"{prefix}ISSUER={issuer!r} is not an http(s) URL")
    return {
        "provider_id": provider_id,
        "name": env(f"{prefix}NAME", provider_id.replace("_", " ").title().replace("Sso", "SSO")),
        "client_id": client_id,
        "secret": secret,
        "settings": {
            "server_url": issuer,
            "oauth_pkce_enabled": True,
            "scope": env(f"{prefix}SCOPES", "openid profile email").split(),
            "groups_claim": env(f"{prefix}GROUPS_CLAIM", "groups"),
            "admin_groups": env_list(f"{prefix}ADMIN_GROUPS", []),
            "reviewer_groups": env_list(f"{prefix}REVIEWER_GROUPS", []),
            "step_up_acr_values": env(f"{prefix}STEP_UP_ACR_VALUES"),
            # How its people step up: "auto" (a factor enrolled here if they have one,
            # else signing in again at the provider), "provider" or "factor" alone.
            "step_up": env_choice(f"{prefix}STEP_UP", "auto", ("auto", "provider", "factor")),
        },
    }


# Single sign-on: OIDC_ISSUER & co. for one provider, or OIDC_PROVIDERS=okta,keycloak
# with OIDC_OKTA_ISSUER & co. for several (see the settings reference).
#: `OIDC_ISSUER` / `OIDC_CLIENT_ID` / `OIDC_CLIENT_SECRET` | — | single sign-on through one OpenID
#:   Connect provider (id `sso`); see Sign-in, SSO and MFA
#: `OIDC_PROVIDERS` | `sso` when `OIDC_ISSUER` is set | comma-separated provider ids, each
#:   configured by `OIDC_<ID>_ISSUER`, `_CLIENT_ID`, `_CLIENT_SECRET` and the rest below
#: `OIDC_NAME` / `OIDC_SCOPES` | the id, capitalised (`SSO`, `Okta`) / `openid profile email` | the
#:   button's name; the scopes asked for (per provider: `OIDC_<ID>_NAME`, …)
#: `OIDC_GROUPS_CLAIM` | `groups` | the claim(s) whose values are matched against the groups below
#:   (comma-separated claims are joined)
#: `OIDC_ADMIN_GROUPS` / `OIDC_REVIEWER_GROUPS` | — | comma-separated groups that make someone an
#:   admin / a reviewer (in neither: no access)
#: `OIDC_STEP_UP` / `OIDC_STEP_UP_ACR_VALUES` | `auto` / — | how the provider's people step up
#:   (`auto`, `provider`, `factor`); `acr_values` sent when they sign in again there
OIDC_PROVIDER_IDS = env_list("OIDC_PROVIDERS", ["sso"] if env("OIDC_ISSUER") else [])
SOCIALACCOUNT_PROVIDERS = {
    "oidc": {
        "APPS": [
            oidc_provider(
                "OIDC_"
                if provider_id == "sso" and env("OIDC_ISSUER")
                else f"OIDC_{provider_id.upper()}_",
                provider_id,
            )
            for provider_id in OIDC_PROVIDER_IDS
        ],
        "OAUTH_PKCE_ENABLED": True,
    }
}
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_EMAIL_AUTHENTICATION = (
    False  # an address is no proof: never joined to a local account
)
SOCIALACCOUNT_LOGIN_ON_GET = False
SOCIALACCOUNT_STORE_TOKENS = False
# The providers' sign-in pages take the form posts that start a sign-in.
CONTENT_SECURITY_POLICY["DIRECTIVES"]["form-action"] += [
    "{0.scheme}://{0.netloc}".format(urlsplit(app["settings"]["server_url"]))
    for app in SOCIALACCOUNT_PROVIDERS["oidc"]["APPS"]
]

LANGUAGE_CODE = "en-us"
#: `TIME_ZONE` | `UTC` | display time zone
TIME_ZONE = env("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "staticfiles"
WHITENOISE_AUTOREFRESH = DEBUG
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True

#: `EMAIL_BACKEND` | console backend | Django email backend for notifications
EMAIL_BACKEND = env("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
#: `DEFAULT_FROM_EMAIL` | `airlock@localhost` | sender of notification mail
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", "airlock@localhost")
# The SMTP backend's server (EMAIL_BACKEND=django.core.mail.backends.smtp.EmailBackend).
#: `EMAIL_HOST` / `EMAIL_PORT` | `localhost` / `25` | the SMTP server of the SMTP backend
EMAIL_HOST = env("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1, maximum=65535)
#: `EMAIL_HOST_USER` / `EMAIL_HOST_PASSWORD` / `EMAIL_USE_TLS` | — / — / `false` | its login and
#:   STARTTLS
EMAIL_HOST_USER = env("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
#: `EMAIL_TIMEOUT` | `10` | seconds before a mail attempt fails (and is retried)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)

# Slack: review requests posted by a bot, decided with its buttons (see the reviewers' guide).
#: `SLACK_BOT_TOKEN` | — | the Slack app's bot token; without it nothing is posted to Slack
SLACK_BOT_TOKEN = env("SLACK_BOT_TOKEN")
#: `SLACK_SIGNING_SECRET` | — | the Slack app's signing secret; without it `/slack/…` answers 503
SLACK_SIGNING_SECRET = env("SLACK_SIGNING_SECRET")
#: `SLACK_API_URL` | `https://slack.com/api/` | Slack's Web API base (the tests point it at a
#:   stand-in)
SLACK_API_URL = env("SLACK_API_URL", "https://slack.com/api/").rstrip("/") + "/"
#: `SLACK_TIMEOUT_SECONDS` | `5` | per Slack API call
SLACK_TIMEOUT_SECONDS = env_int("SLACK_TIMEOUT_SECONDS", 5, minimum=1, maximum=60)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "approvals.agents.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "infrastructure.rest.negotiation.JSONFirstNegotiation",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "infrastructure.rest.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Airlock agent API",
    "DESCRIPTION": "Propose actions, wait for decisions, read results.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # One name per set of states, whichever serializer shows it.
    "ENUM_NAME_OVERRIDES": {
        "ProposalStatusEnum": "approvals.choices.ProposalStatus",
        "ExecutionStatusEnum": "executions.choices.ExecutionStatus",
        "SandboxStatusEnum": "executions.models.SandboxSession.Status",
    },
    # <id:pk> (infrastructure.converters): the ids a 64-bit key holds; past them, a 404.
    "PATH_CONVERTER_OVERRIDES": {
        "id": {"type": "integer", "format": "int64", "minimum": 0, "maximum": 2**63 - 1},
    },
}

#: `AUDIT_SINKS` | — | comma-separated places every audit record is sent to, in order and at least
#:   once: `syslog://host:514` (RFC 5424 over TCP; `syslog+tls://` over TLS),
#:   `splunk+https://TOKEN@host:8088` (Splunk HTTP Event Collector), `https://host/path` (JSON lines;
#:   `TOKEN@` sent as a bearer token), `stdout:` (JSON lines on the worker's output); `?ca=PATH`
#:   checks a TLS receiver against a private CA
AUDIT_SINKS = env_list("AUDIT_SINKS", [])
#: `AUDIT_SHIP_SECONDS` | `5` | how often a worker sends the sinks what they lack
AUDIT_SHIP_SECONDS = env_int("AUDIT_SHIP_SECONDS", 5, minimum=1)
#: `AUDIT_SIGNING_KEY_FILE` / `AUDIT_SIGNING_KEY` | — | an Ed25519 private key (PEM; a file, or the
#:   text itself) that signs checkpoints of the chain's head; keep it where the database is not
#:   (`manage.py audit_checkpoint --new-key PATH` makes one)
AUDIT_SIGNING_KEY_FILE, AUDIT_SIGNING_KEY = env("AUDIT_SIGNING_KEY_FILE"), env("AUDIT_SIGNING_KEY")
#: `AUDIT_CHECKPOINT_MINUTES` | `10` | how often a worker with the key signs the head
AUDIT_CHECKPOINT_MINUTES = env_int("AUDIT_CHECKPOINT_MINUTES", 10, minimum=1)
#: `AUDIT_CHECKPOINT_FILE` | `$AIRLOCK_DATA_DIR/audit-checkpoints.jsonl` | where each signed
#:   checkpoint is appended (keep a copy away from the database too)
AUDIT_CHECKPOINT_FILE = env("AUDIT_CHECKPOINT_FILE", str(DATA_DIR / "audit-checkpoints.jsonl"))

#: `RETENTION_DAYS` | `0` (keep all) | the output of executions that finished more than this many
#:   days ago is archived, a day per file, then removed from the database
#: `RETENTION_PROPOSAL_DAYS` | `RETENTION_DAYS` | finished proposals decided more than this many days
#:   ago (with their decisions and execution) are archived, then removed; at least `RETENTION_DAYS`
#:   (a proposal leaves only after its output)
#: `RETENTION_AUDIT_DAYS` | `0` (keep all) | audit records older than this many days move to the
#:   archive with the chain's continuity kept (`verify_audit --archive` checks across both); the
#:   chain's last record and any not yet acknowledged by every audit sink stay
#: `RETENTION_ARCHIVE` | `$AIRLOCK_DATA_DIR/archive` | where: a directory, or an S3-compatible
#:   bucket `s3://bucket/prefix?endpoint=https://host:9000&region=R` (credentials as boto3 reads
#:   them: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, a profile or a role); files
#:   `<kind>/YYYY-MM-DD.jsonl.gz` and a `manifest.json` of checksums
RETENTION_DAYS = env_int("RETENTION_DAYS", 0, minimum=0)
RETENTION_PROPOSAL_DAYS = env_int("RETENTION_PROPOSAL_DAYS", RETENTION_DAYS, minimum=0)
if RETENTION_PROPOSAL_DAYS and not 0 < RETENTION_DAYS <= RETENTION_PROPOSAL_DAYS:
    raise ImproperlyConfigured(
        f"RETENTION_PROPOSAL_DAYS={RETENTION_PROPOSAL_DAYS} needs RETENTION_DAYS from 1 to it: "
        "a proposal leaves the database only after its output"
    )
RETENTION_AUDIT_DAYS = env_int("RETENTION_AUDIT_DAYS", 0, minimum=0)
RETENTION_ARCHIVE = env("RETENTION_ARCHIVE") or str(DATA_DIR / "archive")
#: `BACKUP_DIR` | — | where a worker puts a backup every `BACKUP_EVERY_HOURS` (a directory
#:   `airlock-…` each, as `manage.py backup` makes); unset, none is scheduled
#: `BACKUP_EVERY_HOURS` / `BACKUP_KEEP` | `24` / `7` | how often; how many of the newest are kept
#: `BACKUP_VERIFY` | `true` | each scheduled backup is restored into a scratch place and its audit
#:   chain verified before it counts (one that fails is kept as `…-failed`)
BACKUP_DIR = env("BACKUP_DIR")
BACKUP_EVERY_HOURS = env_int("BACKUP_EVERY_HOURS", 24, minimum=1)
BACKUP_KEEP = env_int("BACKUP_KEEP", 7, minimum=1)
BACKUP_VERIFY = env_bool("BACKUP_VERIFY", True)

# Execution.
#: `SANDBOX_BACKEND` | `auto` | `auto`, `local`, `docker` or `gvisor`; `auto` picks the strongest
#:   that works
SANDBOX_BACKEND = env_choice("SANDBOX_BACKEND", "auto", ("auto", "local", "docker", "gvisor"))
#: `SANDBOX_IMAGE` | `airlock-sandbox:latest` | image for the docker and gvisor backends
SANDBOX_IMAGE = env("SANDBOX_IMAGE", "airlock-sandbox:latest")
#: `SANDBOX_DOCKER_MODE` | `keepalive` | `keepalive` (warm containers) or `oneshot`
SANDBOX_DOCKER_MODE = env_choice("SANDBOX_DOCKER_MODE", "keepalive", ("keepalive", "oneshot"))
#: `SANDBOX_POOL_MAX_RUNS` | `50` | recycle a warm container after this many runs
SANDBOX_POOL_MAX_RUNS = env_int("SANDBOX_POOL_MAX_RUNS", 50, minimum=1)
#: `SANDBOX_POOL_IDLE_MINUTES` | `10` | recycle a warm container idle this long
SANDBOX_POOL_IDLE_MINUTES = env_int("SANDBOX_POOL_IDLE_MINUTES", 10, minimum=1)
#: `SANDBOX_SESSION_IDLE_MINUTES` | `30` | reap persistent sandbox sessions idle this long
SANDBOX_SESSION_IDLE_MINUTES = env_int("SANDBOX_SESSION_IDLE_MINUTES", 30, minimum=1)
#: `SESSION_WORKER_TIMEOUT_SECONDS` | `120` | a sandbox session whose worker process was not seen
#:   this long is closed
SESSION_WORKER_TIMEOUT_SECONDS = env_int("SESSION_WORKER_TIMEOUT_SECONDS", 120, minimum=10)
#: `OUTPUT_CAP_BYTES` | `1048576` | output kept per execution; the rest is cut and flagged
OUTPUT_CAP_BYTES = env_int("OUTPUT_CAP_BYTES", 1024 * 1024, minimum=1024)
#: `SCRIPT_MEMORY_MB` | `256` | default memory limit of a script
SCRIPT_MEMORY_MB = env_int("SCRIPT_MEMORY_MB", 256, minimum=16)
#: `WORKER_HEARTBEAT_SECONDS` | `5` | how often a running execution proves its worker alive
WORKER_HEARTBEAT_SECONDS = env_int("WORKER_HEARTBEAT_SECONDS", 5, minimum=1)
#: `WORKER_LOST_AFTER_SECONDS` | `30` | silence after which a running execution is `lost`
WORKER_LOST_AFTER_SECONDS = env_int("WORKER_LOST_AFTER_SECONDS", 30, minimum=2)
#: `SWEEP_INTERVAL_SECONDS` | `15` | how often the sweeper runs
SWEEP_INTERVAL_SECONDS = env_int("SWEEP_INTERVAL_SECONDS", 15, minimum=1)
#: `REQUEUE_AFTER_SECONDS` | `30` | re-dispatch an execution still queued after this long
REQUEUE_AFTER_SECONDS = env_int("REQUEUE_AFTER_SECONDS", 30, minimum=1)
#: `RESULT_INLINE_BYTES` | `65536` | bytes of stdout and of stderr an answer to `?until=finished`
#:   carries inline in its `result` (the rest: `output_url`)
RESULT_INLINE_BYTES = env_int("RESULT_INLINE_BYTES", 64 * 1024, minimum=0)
#: `TOOL_REPORT_SECONDS` | `3600` | how long an agent has, once its `tool.call` is approved, to
#:   report how it went; after it the execution is `lost`
TOOL_REPORT_SECONDS = env_int("TOOL_REPORT_SECONDS", 3600, minimum=10)
#: `LONG_POLL_MAX_SECONDS` | `60` | the longest `?wait=` a client may ask for
LONG_POLL_MAX_SECONDS = env_int("LONG_POLL_MAX_SECONDS", 60, minimum=1)
#: `MCP_WAIT_SECONDS` | `50` | how long an MCP tool call waits for its decision and run when the
#:   agent passes no `wait_seconds` (it may pass up to 3600)
MCP_WAIT_SECONDS = env_int("MCP_WAIT_SECONDS", 50, minimum=0, maximum=3600)
#: `MCP_EGRESS_VOLUME` | (empty) | a Docker volume for the proxy folders of MCP servers run from
#:   images with a network list, where the engine cannot bind this host's paths (the scale
#:   deployment); empty: a temporary folder, bind-mounted
MCP_EGRESS_VOLUME = env("MCP_EGRESS_VOLUME", "")
#: `MCP_EGRESS_DIR` | (empty) | where `MCP_EGRESS_VOLUME` is mounted in the web process's container
MCP_EGRESS_DIR = env("MCP_EGRESS_DIR", "")
#: `DOCKER_ACTION_CONTAINERS` | `*` | the containers Docker actions may act on: `*` (any), or
#:   comma-separated rules `label:KEY`, `label:KEY=VALUE`, `name:GLOB` (the compose deployment:
#:   `label:airlock.actions`); Airlock's own sandbox containers never
DOCKER_ACTION_CONTAINERS = env_targets("DOCKER_ACTION_CONTAINERS", "*")
#: `HOST_ACTIONS_SYSTEMCTL` | `systemctl` | the systemctl executable host service actions call
HOST_ACTIONS_SYSTEMCTL = env("HOST_ACTIONS_SYSTEMCTL", "systemctl")
# The host a host action acts on when it names none: the console's own (embedded,
# where web and worker share it). Set empty where there are several: then it must name one.
#: `HOST_ACTIONS_DEFAULT_HOST` | `WORKER_HOSTNAME` | the host a host action runs on when it names
#:   none
HOST_ACTIONS_DEFAULT_HOST = env("HOST_ACTIONS_DEFAULT_HOST", WORKER_HOSTNAME)

# Policy helpers: an optional LLM pre-validator (OpenAI-compatible chat completions).
#: `PREVALIDATOR_URL` | — | OpenAI-compatible base URL; with `PREVALIDATOR_MODEL`, enables the
#:   pre-validator policy step
PREVALIDATOR_URL = env("PREVALIDATOR_URL")
#: `PREVALIDATOR_MODEL` | — | model name sent to the pre-validator
PREVALIDATOR_MODEL = env("PREVALIDATOR_MODEL")
#: `PREVALIDATOR_API_KEY` | — | bearer key for the pre-validator
PREVALIDATOR_API_KEY = env("PREVALIDATOR_API_KEY")
#: `PREVALIDATOR_TIMEOUT_SECONDS` | `5` | past this the proposal goes to a person
PREVALIDATOR_TIMEOUT_SECONDS = env_int("PREVALIDATOR_TIMEOUT_SECONDS", 5, minimum=1, maximum=120)
#: `PREVALIDATOR_CLASS` | the OpenAI-compatible one | dotted path of another `PreValidator`
PREVALIDATOR_CLASS = env(
    "PREVALIDATOR_CLASS", "approvals.policy.prevalidators.OpenAIChatPreValidator"
)
#: `RISK_SCORERS` | the built-in scorers | comma-separated dotted paths of `RiskScorer` classes
if env("RISK_SCORERS"):
    RISK_SCORERS = [path.strip() for path in env("RISK_SCORERS").split(",") if path.strip()]

#: `LOG_LEVEL` | `INFO` | root log level
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        # The MCP SDK logs the end of every stateless request at INFO.
        "mcp.server.streamable_http": {"level": "WARNING"},
        # Celery logs every task received and succeeded at INFO, the periodic
        # sweeps every few seconds among them; failures are logged at ERROR.
        "celery.worker.strategy": {"level": "WARNING"},
        "celery.app.trace": {"level": "WARNING"},
    },
}

#: `AIRLOCK_TLS_CERT` / `AIRLOCK_TLS_KEY` | — | a certificate and key (PEM) for `serve` to answer
#:   HTTPS itself (`serve --certfile --keyfile`)
#: `PORT` / `AIRLOCK_HOST` | `8000` / `127.0.0.1` | where `serve` listens
#: `AIRLOCK_WEB_PROCESSES` | the number of cores | web processes `serve` starts
#: `ASGI_THREADS` | `32` | request threads per web process (a waiting long-poll holds none)
#: `DOCKER_HOST` | the engine's default socket | the Docker engine the docker actions and the
#:   docker and gvisor backends use (the docker SDK's variable)
