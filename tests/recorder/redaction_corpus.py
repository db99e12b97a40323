"""The redaction corpus: secrets that must go (in every way a log can spell them) and
look-alikes that must stay. Every value here is made up; none is a live credential.

``SECRETS`` maps a name to ``(carrier, secret)``: the text an agent log holds and the part of
it that must not survive. ``ENCODINGS`` turn a carrier into the bytes of a JSON log. Look-alikes
(``LOOKALIKES``) are code and data that must come out unchanged. ``PII`` / ``PII_LOOKALIKES``
are the same for the opt-in personal-data classes.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

# -- secrets: (carrier text, the secret inside it) -------------------------------------------

_OPENAI = "sk-proj-Zq7RkP2vXw9LmN4bT6yHc1JdF8sGa3QeU5oIr0"
_OPENAI_OLD = "sk-Abcdefghij0123456789KLMNOPqrstUVWX"
_ANTHROPIC = "sk-ant-api03-Xq9vT2mN8bL4kR7sW1yZ3cF6hJ0pD5gA"
_AWS = "AKIAIOSFODNN7EXAMPLE"
_AWS_STS = "ASIAQ3EGVP7LRTXA4M2N"
_AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
_GHP = "ghp_8fJ2kL9qR4tY7uI1oP3aS6dF0gH5jK2lZ4xC"
_GH_PAT = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"
_SLACK = "xoxb-2048123456-4096789012-AbCdEfGhIjKlMnOp"
_GOOGLE = "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"
_HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
_JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
_BEARER = "eWx1Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA"
_PW = "Tr0ub4dor-3horse"
_PW2 = "s3cr3t!Passw0rd"
_TOKEN = "a1b2c3d4e5f6a7b8c9d0e1f2"
_URL_PW = "p@ss@w0rd!x"
_PEM = "MIIEpAIBAAKCAQEA1x2Y3z4W5v6U7t8S9r0Q"

SECRETS: dict[str, tuple[str, str]] = {
    "openai key": (f"export OPENAI_API_KEY={_OPENAI}", _OPENAI),
    "openai key, bare": (f"client = OpenAI(api_key='{_OPENAI_OLD}')", _OPENAI_OLD),
    "anthropic key": (f"ANTHROPIC_API_KEY={_ANTHROPIC} python run.py", _ANTHROPIC),
    "aws access key": (f"aws configure set aws_access_key_id {_AWS}", _AWS),
    "aws sts key": (f"key id: {_AWS_STS}", _AWS_STS),
    "aws secret key": (f"aws_secret_access_key = {_AWS_SECRET}", _AWS_SECRET),
    "github token": (f"git clone https://{_GHP}@github.com/org/repo", _GHP),
    "github pat": (f"GH_TOKEN={_GH_PAT}", _GH_PAT),
    "slack token": (f"SLACK_BOT={_SLACK}", _SLACK),
    "google key": (f"https://maps.googleapis.com/api?key={_GOOGLE}", _GOOGLE),
    "huggingface token": (f"huggingface-cli login --token {_HF}", _HF),
    "jwt": (f"cookie: session={_JWT}", _JWT),
    "bearer": (f"curl -H 'Authorization: Bearer {_BEARER}' https://api.example.com", _BEARER),
    "password, shell": (f"mysql -u root --password={_PW} -e 'select 1'", _PW),
    "password, env": (f"DB_PASSWORD={_PW2}", _PW2),
    "password, code": (f'conn = connect(user="app", password="{_PW2}")', _PW2),
    "password, yaml": (f"password: {_PW}", _PW),
    "secret, json": (f'{{"client_secret": "{_PW2}"}}', _PW2),
    "api token": (f"API_KEY={_TOKEN}", _TOKEN),
    "token header": (f"X-Auth-Token: {_TOKEN}", _TOKEN),
    "url password with @": (f"git push https://deploy:{_URL_PW}@git.example.com/r.git", _URL_PW),
    "url password": (f"postgres://admin:{_PW}@db.internal:5432/app", _PW),
    "private key": (
        f"-----BEGIN RSA PRIVATE KEY-----\n{_PEM}\n-----END RSA PRIVATE KEY-----",
        _PEM,
    ),
}

# secrets whose carrier can be a file name (no slash or space in it)
FILE_NAME_SECRETS: dict[str, str] = {
    "aws access key": f"logs/{_AWS}.json",
    "github token": f"runs/{_GHP}/trajectory.traj",
    "openai key": f"out/{_OPENAI}.jsonl",
    "huggingface token": f"{_HF}.json.gz",
    "slack token": f"logs\\{_SLACK}.json",
}


def _u_escaped(text: str) -> bytes:
    """``text`` as a JSON string with every letter and digit written as a ``\\u`` escape."""
    body = "".join(f"\\u{ord(c):04x}" if c.isalnum() else c for c in text)
    body = body.replace('"', '\\"').replace("\n", "\\n")
    return b'{"content": "' + body.encode() + b'"}'


ENCODINGS: dict[str, Callable[[str], bytes]] = {
    "plain": lambda s: orjson.dumps({"content": s}),
    "u-escaped": _u_escaped,
    "after a backslash": lambda s: orjson.dumps({"path": "C:\\keys\\" + s}),
    "after an escape": lambda s: orjson.dumps({"output": "ok\n" + s + "\tdone"}),
    "nested json": lambda s: orjson.dumps({"content": orjson.dumps({"cmd": s}).decode()}),
    "object key": lambda s: orjson.dumps({"env": {s: True}}),
    "jsonl line": lambda s: orjson.dumps({"role": "tool", "content": [{"text": s}]}),
}

# -- look-alikes: must come out unchanged (secrets off PII) -----------------------------------

LOOKALIKES: dict[str, str] = {
    "fixture password": 'user = User.objects.create_user("alice", password="password")',
    "fixture secret": 'settings.configure(SECRET_KEY="secret")',
    "attribute": "self.password = password",
    "form field": 'password = self.cleaned_data.get("password")',
    "set_password": "user.set_password(raw_password)",
    "signature": "def login(username: str, password: str) -> Token:",
    "annotation": "password: Optional[str] = None",
    "secret from settings": "secret = settings.SECRET_KEY",
    "token from header": 'token = request.headers.get("Authorization")',
    "key from env": 'api_key = os.environ["OPENAI_API_KEY"]',
    "getpass": "pwd = getpass.getpass()",
    "env reference": "PASSWORD=${DB_PASSWORD}",
    "placeholder": "password=<your-password>",
    "null in json": '{"password": null, "token": null}',
    "env dump path": "PWD=/home/agent/workspace",
    "kwarg same name": "connect(host=host, password=password, token=token)",
    "git hash": "commit 3f2a1b9c0d4e5f60718293a4b5c6d7e8f9a0b1c2",
    "short hash": "HEAD is now at 9fceb02 Fix the password reset form",
    "sha256": "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "uuid": "request 123e4567-e89b-12d3-a456-426614174000 done",
    "word with sk-": "disk-usage-report-for-all-mounted-volumes",
    "tokenizer": "tokenizer = AutoTokenizer.from_pretrained(model_name)",
    "max tokens": "max_tokens=1024, temperature=0.0",
    "hf hub call": 'hf_hub_download(repo_id="org/model", filename="config.json")',
    "url without credentials": "git+ssh://git@github.com:org/repo.git",
    "url with port": "http://localhost:8080/api/v1/items",
    "url with @ in path": "https://example.com/users/@alice/profile",
    "email (PII off)": "Author: Jane Doe <jane.doe@example.com>",
    "ip (PII off)": "Listening on 192.168.1.20:8000",
    "bearer in prose": "The server expects the Bearer scheme.",
    "jwt header only": "header eyJhbGciOiJIUzI1NiJ9 only",
    "password reset url": "path('password_reset/', views.PasswordResetView.as_view())",
    # honest misses: a variable name that says nothing about the key looks like a value
    "snake_case variable": "password = user_pw",
}

# -- personal data, opt-in --------------------------------------------------------------------

PII: dict[str, tuple[str, str, str]] = {  # name: (class, carrier, the value)
    "email": (
        "email",
        "Contact: jane.doe+bugs@example.co.uk for access",
        "jane.doe+bugs@example.co.uk",
    ),
    "email in git log": ("email", "Author: Bob <bob@corp.example.com>", "bob@corp.example.com"),
    "phone, international": ("phone", "call +1 415 555 0132 today", "+1 415 555 0132"),
    "phone, dashes": ("phone", "tel 415-555-0132", "415-555-0132"),
    "phone, parens": ("phone", "phone: (415) 555-0132", "(415) 555-0132"),
    "phone, german": ("phone", "Tel.: +49 30 1234 5678", "+49 30 1234 5678"),
    "ipv4": ("ip", "ssh root@203.0.113.42 -p 22", "203.0.113.42"),
    "ipv4 private": ("ip", "inet 10.0.12.7/24 brd", "10.0.12.7"),
    "ipv6": ("ip", "addr 2001:db8:85a3::8a2e:370:7334 up", "2001:db8:85a3::8a2e:370:7334"),
    "ipv6 full": (
        "ip",
        "from fe80:0000:0000:0000:0202:b3ff:fe1e:8329",
        "fe80:0000:0000:0000:0202:b3ff:fe1e:8329",
    ),
}

PII_LOOKALIKES: dict[str, str] = {
    "version": "numpy==1.26.4 and python 3.11.7",
    "date": "released 2024-01-15",
    "time": "at 12:30:00 UTC",
    "cpp scope": "std::vector<int> v; boost::asio::io_context ctx;",
    "loopback": "curl http://127.0.0.1:8000/health",
    "any address": "bind 0.0.0.0:80",
    "ipv6 loopback": "listen [::1]:8080",
    "decorator": "@pytest.mark.parametrize('x', [1, 2])",
    "git hash": "commit 3f2a1b9c0d4e5f60718293a4b5c6d7e8f9a0b1c2",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
    "big number": "loss 1234567890.5 after 4096 steps",
    "python slice": "x[1:2:3], y[::2]",
}
