"""Credentials: found and masked in text, JSON and streamed output; originals sealed at rest.

Every secret here is made at run time: the repository's own secret scan reads this file.
"""

from __future__ import annotations

import base64
import json
import random
import string

import pytest
from cryptography.fernet import Fernet

from infrastructure.credentials import (
    CredentialsKeyError,
    Found,
    OutputMasker,
    find,
    mask,
    mask_json,
    mask_text,
    seal,
    unseal,
)

UPPER = string.ascii_uppercase + string.digits
ALNUM = string.ascii_letters + string.digits


def random_text(alphabet: str, length: int, seed: int) -> str:
    return "".join(random.Random(seed).choices(alphabet, k=length))


def b64url(obj: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


AWS_ID = "AKIA" + random_text(UPPER, 16, 1)
GITHUB = "ghp_" + random_text(ALNUM, 36, 2)
GITHUB_PAT = "github_" + "pat_" + random_text(ALNUM + "_", 82, 3)
SLACK = "xoxb-" + "-".join(
    (
        random_text(string.digits, 12, 4),
        random_text(string.digits, 13, 5),
        random_text(ALNUM, 24, 6),
    )
)
STRIPE = "sk_" + "live_" + random_text(ALNUM, 24, 7)
PASS = "Pw" + random_text(ALNUM, 10, 8) + "7"
RANDOM = random_text(ALNUM, 40, 9)
JWT = ".".join(
    (b64url({"alg": "HS256", "typ": "JWT"}), b64url({"sub": "deploy"}), random_text(ALNUM, 43, 10))
)
BEGIN, END = "-----BEGIN " + "RSA PRIVATE KEY-----", "-----END " + "RSA PRIVATE KEY-----"
BODY = "\n".join(random_text(ALNUM + "+/", 64, 11 + line) for line in range(4))
KEY = f"{BEGIN}\n{BODY}\n{END}"
KNOWN = "kn0wn-" + random_text(ALNUM, 12, 20)
ADMIN_ID = random_text("0123456789abcdef", 12, 21)
ASSIGNED = "password in an assignment"


@pytest.mark.parametrize(
    "text, kind, secret, masked",
    [
        (f"export AWS_ACCESS_KEY_ID={AWS_ID}", "AWS access key id", AWS_ID, "AKIA…"),
        (f"gh auth status # {GITHUB}", "GitHub token", GITHUB, "ghp_…"),
        (f"echo {GITHUB_PAT} | gh auth login", "GitHub token", GITHUB_PAT, "gith…"),
        (f"slack says {SLACK} is ours", "Slack token", SLACK, "xoxb…"),
        (f"STRIPE = {STRIPE!r}", "Stripe key", STRIPE, "sk_l…"),
        (
            f"psql postgres://app:{PASS}@db:5432/app",
            "basic-auth password in a URL",
            PASS,
            PASS[:3] + "…",
        ),
        (f"DB_PASSWORD={PASS} ./migrate", ASSIGNED, PASS, PASS[:3] + "…"),
        (f'password = "{PASS}"', ASSIGNED, PASS, PASS[:3] + "…"),
        (f"mysql --password {PASS} -h db", ASSIGNED, PASS, PASS[:3] + "…"),
        (f'config = {{"seed": "{RANDOM}"}}', "high-entropy string", RANDOM, RANDOM[:4] + "…"),
        (f"curl -H 'Authorization: Bearer {JWT}'", "JSON web token", JWT, "eyJh…"),
        (KEY, "private key", KEY, f"{BEGIN}\n…\n{END}"),
    ],
)
def test_each_kind_is_found_and_masked_with_its_prefix(text, kind, secret, masked):
    assert find(text) == [Found(kind, secret)]
    assert mask(secret) == masked
    assert mask_text(text) == (text.replace(secret, masked), [Found(kind, secret)])


def test_a_short_secret_keeps_a_quarter_at_most_and_under_eight_characters_none():
    assert mask("abcdefghijklmnopqrstuvwxyz") == "abcd…"
    assert mask("abcdefghijkl") == "abc…"
    assert mask("abcdefgh") == "ab…"
    assert mask("abcdefg") == "…"


@pytest.mark.parametrize(
    "text",
    [
        "import os\nprint(6*7)\n",
        "rm -rf /srv/cache/*",
        "docker restart airlock-web-1 && docker logs --tail 50 airlock-worker-2",
        "systemctl restart nginx.service; journalctl -u nginx --since '10 min ago'",
        "kubectl get secret db-creds -n prod -o name",
        "git checkout 3f2a9c1 && git log --oneline -5",
        "curl -fsSL https://example.com/install.sh | sh",
        "psql postgres://app@db:5432/app -c 'select 1'",
        "export PASSWORD=$DB_PASSWORD\nexport TOKEN=${API_TOKEN}",
        "password: required\nsecret_name: db-creds\ntoken_file: /run/secrets/api\n",
        (
            "import getpass, os, uuid\n\n"
            "def main():\n"
            "    token = os.environ['API_TOKEN']\n"
            "    password = getpass.getpass()\n"
            "    claim = uuid.uuid4().hex\n"
            "    secret = load_secret(name='db')\n"
            "    print(f'connecting as {user}')\n"
        ),
        'for f in *.log; do gzip -9 "$f"; done\ntar -czf logs.tgz /var/log/app\n',
        "apt-get update && apt-get install -y --no-install-recommends ca-certificates\n",
    ],
)
def test_text_without_a_secret_is_left_as_it_is(text):
    assert find(text) == []
    assert mask_text(text) == (text, [])


def test_known_values_are_masked_wherever_they_are_and_short_ones_ignored():
    longer = KNOWN + "-more"
    text = f"using {KNOWN} then {longer}; pin 4321 and {KNOWN}."
    masked, found = mask_text(text, known=[KNOWN, longer, "4321"])
    assert found == []
    assert masked == f"using {mask(KNOWN)} then {mask(longer)}; pin 4321 and {mask(KNOWN)}."
    assert KNOWN not in masked


def test_a_secret_found_once_is_masked_where_nothing_says_it_is_one():
    text = f"git clone https://ci:{PASS}@git.example.com/r\nfatal: bad password {PASS}\n"
    masked, found = mask_text(text)
    assert found == [Found("basic-auth password in a URL", PASS)]
    assert PASS not in masked and masked.count(mask(PASS)) == 2


def test_json_strings_are_masked_at_any_depth_and_by_their_keys_names():
    creds = "db-creds"  # a name: not a secret, though its key says "secret"
    obj = {
        "command": f"deploy --token {GITHUB}",
        "env": {"DB_PASSWORD": PASS, "HOME": "/root", "API_KEY": "${VAULT_KEY}"},
        "args": ["--verbose", [f"s3://backup/{AWS_ID}"], 3, 2.5, None, True],
        "secret_name": creds,
        "note": f"rotate {PASS} after the deploy",
    }
    original = json.loads(json.dumps(obj))
    masked, found = mask_json(obj)
    assert obj == original  # a new object
    assert masked == {
        "command": "deploy --token ghp_…",
        "env": {"DB_PASSWORD": mask(PASS), "HOME": "/root", "API_KEY": "${VAULT_KEY}"},
        "args": ["--verbose", ["s3://backup/AKIA…"], 3, 2.5, None, True],
        "secret_name": creds,
        "note": f"rotate {mask(PASS)} after the deploy",
    }
    assert sorted(f.value for f in found) == sorted([GITHUB, PASS, AWS_ID])


def test_a_private_key_is_found_as_its_block_also_escaped_in_json_or_unfinished():
    text = f"key:\n{KEY}\nafter"
    assert find(text) == [Found("private key", KEY)]
    masked = mask_text(text)[0]
    assert masked == f"key:\n{BEGIN}\n…\n{END}\nafter"
    assert not any(line in masked for line in BODY.splitlines())

    document = json.dumps({"ssh_key": KEY, "host": "db"})
    assert json.loads(mask_text(document)[0]) == {"ssh_key": f"{BEGIN}\n…\n{END}", "host": "db"}

    cut_off = f"{BEGIN}\n{BODY}"
    assert mask_text(cut_off)[0] == f"{BEGIN}\n…"


def test_admin_patterns_give_their_first_group_or_the_whole_match():
    patterns = [r"acme-([0-9a-f]{12})", r"corp_[A-Z]{10}"]
    corp = "corp_" + random_text(string.ascii_uppercase, 10, 30)
    text = f"id acme-{ADMIN_ID} and {corp}"
    assert find(text, patterns) == [
        Found(f"secret pattern {patterns[0]}", ADMIN_ID),
        Found(f"secret pattern {patterns[1]}", corp),
    ]
    assert mask_text(text, patterns=patterns)[0] == f"id acme-{ADMIN_ID[:3]}… and cor…"


def stream(text: str, cuts: list[int], known=(KNOWN,), patterns=()) -> str:
    masker = OutputMasker(known, patterns)
    out, previous = [], 0
    for cut in [*cuts, len(text)]:
        out.append(masker.feed(text[previous:cut]))
        previous = cut
    return "".join(out) + masker.flush()


STREAMED = [
    AWS_ID,
    GITHUB,
    GITHUB_PAT,
    SLACK,
    STRIPE,
    f"https://deploy:{PASS}@registry.example.com/v2/",
    KEY,
    json.dumps(KEY)[1:-1],  # in a JSON string: \n, not line breaks
    KNOWN,
    f"acme-{ADMIN_ID}",
]


@pytest.mark.parametrize("secret", STREAMED, ids=range(len(STREAMED)))
def test_a_secret_split_at_any_boundary_never_shows_and_no_text_is_lost(secret):
    patterns = [r"acme-([0-9a-f]{12})"]
    text = f"step 1: ok\nusing {secret} now\nstep 2: done\n"
    expected = mask_text(text, known=[KNOWN], patterns=patterns)[0]
    assert expected != text
    for cut in range(len(text) + 1):
        assert stream(text, [cut], patterns=patterns) == expected, cut


def test_secrets_in_long_output_cut_anywhere_come_out_as_mask_text_gives():
    pieces = [*STREAMED, "plain words", "x" * 3000, "\n", "done.\r", "AKIA", "ghp_", "://a:b"]
    rng = random.Random(5)
    for _ in range(200):
        text = rng.choice([" ", "\n", "\t"]).join(rng.choices(pieces, k=rng.randint(1, 12)))
        text += rng.choice(["", "\n", " " + "y" * 5000])
        cuts = sorted(rng.sample(range(len(text) + 1), k=min(len(text) + 1, rng.randint(1, 6))))
        expected = mask_text(text, known=[KNOWN], patterns=[r"acme-([0-9a-f]{12})"])[0]
        assert stream(text, cuts, patterns=[r"acme-([0-9a-f]{12})"]) == expected


def test_two_secrets_run_together_are_masked_as_one_in_any_chunks():
    text = f"{SLACK}{STRIPE}{AWS_ID}{GITHUB}{GITHUB}\n"
    whole = stream(text, [])
    assert whole == "xoxb…\n"
    for cut in range(len(text) + 1):
        assert stream(text, [cut]) == whole


def test_complete_lines_are_shown_at_once_and_a_line_without_its_end_waits():
    masker = OutputMasker([KNOWN])
    assert masker.feed("building...\nstep 1/3\n") == "building...\nstep 1/3\n"
    assert masker.feed("Continue? [y/N] ") == ""
    assert masker.feed("y\r") == "Continue? [y/N] y\r"
    assert masker.feed("last words") == ""
    assert masker.flush() == "last words"


def test_a_long_line_is_shown_but_for_a_tail_that_could_begin_a_secret():
    masker = OutputMasker([KNOWN])
    line = "z" * 100_000
    shown = masker.feed(line)
    assert len(line) - masker.cap <= len(shown) < len(line)
    assert shown + masker.flush() == line


def test_a_key_of_any_size_is_dropped_as_it_comes_not_held():
    masker = OutputMasker()
    shown = [masker.feed(f"before\n{BEGIN}\n")]
    for line in range(20_000):
        shown.append(masker.feed(random_text(ALNUM, 64, line % 50) + "\n"))
        assert len(masker._held) <= 64
    shown += [masker.feed(f"{END}\nafter\n"), masker.flush()]
    assert "".join(shown) == f"before\n{BEGIN}\n…\n{END}\nafter\n"


@pytest.fixture
def key(settings):
    settings.CREDENTIALS_KEY = Fernet.generate_key().decode()
    return settings


def test_what_is_sealed_unseals_and_shows_nothing_of_itself(key):
    original = {"command": f"deploy --token {GITHUB}", "env": {"DB_PASSWORD": PASS}}
    token = seal(original)
    assert GITHUB not in token and PASS not in token
    assert unseal(token) == original


def test_a_token_sealed_under_another_key_is_refused_by_name(key):
    token = seal(["x"])
    first = key.CREDENTIALS_KEY
    key.CREDENTIALS_KEY = Fernet.generate_key().decode()
    with pytest.raises(CredentialsKeyError, match="CREDENTIALS_KEY"):
        unseal(token)
    key.CREDENTIALS_KEY = f"{key.CREDENTIALS_KEY},{first}"  # rotated: the old key still opens
    assert unseal(token) == ["x"]


@pytest.mark.parametrize("value", ["", "not-a-fernet-key"])
def test_a_missing_or_malformed_key_is_refused_by_name(settings, value):
    settings.CREDENTIALS_KEY = value
    with pytest.raises(CredentialsKeyError, match="CREDENTIALS_KEY"):
        seal({"a": 1})


def test_the_derived_key_is_a_fernet_key_of_its_own_per_secret(settings):
    from console.environment import derived_key

    first, second = derived_key("secret one"), derived_key("secret two")
    Fernet(first)  # a valid key
    assert first == derived_key("secret one") and first != second
    settings.CREDENTIALS_KEY = first
    token = seal({"a": 1})
    settings.CREDENTIALS_KEY = second
    with pytest.raises(CredentialsKeyError, match="CREDENTIALS_KEY"):
        unseal(token)
