"""The ``edit`` and ``refactor`` prompts of the fresh set (``speculative_fresh_prompts``),
written fresh for issue #39 before any tuning commit; not to be edited to fit results (see
that module). Each list is in written order, which fixes the tune/held split.

``EDIT``: return a file with one or two values changed; the first two answers are short
(a TOML and a JSON config of about 60 tokens), the others 150-300 tokens. ``REFACTOR``:
rename or restructure a given function and return it whole.
"""
from __future__ import annotations

EDIT: list[tuple[str, str]] = [
    ("toml-port", '''\
Return this config file with the port changed to 8081. Reply with the file only.

[server]
host = "0.0.0.0"
port = 8080
workers = 4

[log]
level = "info"
file = "/var/log/relay.log"
rotate = "daily"
'''),
    ("json-timeout", '''\
Set "timeout_ms" to 2500 in this JSON and return the whole JSON, nothing else.

{
  "name": "billing-worker",
  "queue": "invoices",
  "timeout_ms": 1200,
  "retries": 3,
  "concurrency": 8,
  "dead_letter": true
}
'''),
    ("python-settings", '''\
In this settings module, raise MAX_UPLOAD_MB to 50 and make the default locale "de_DE". \
Return the complete module.

"""Settings for the photo gallery service."""
from dataclasses import dataclass

MAX_UPLOAD_MB = 25
ALLOWED_TYPES = ("image/jpeg", "image/png", "image/webp")
THUMBNAIL_SIZES = (128, 256, 512)
DEFAULT_LOCALE = "en_US"
CACHE_SECONDS = 3600


@dataclass
class StorageSettings:
    bucket: str = "gallery-originals"
    region: str = "eu-central-1"
    public_read: bool = False
    lifecycle_days: int = 365


@dataclass
class MailSettings:
    sender: str = "no-reply@gallery.example"
    smtp_host: str = "smtp.gallery.example"
    smtp_port: int = 587
    use_tls: bool = True
'''),
    ("yaml-workflow", '''\
Change this workflow to test on Node 20 instead of 18, and run it at 04:30 instead of 03:00. \
Return the complete workflow file.

name: nightly-checks
on:
  schedule:
    - cron: "0 3 * * *"
  workflow_dispatch:

jobs:
  test:
    runs-on: ubuntu-latest
    strategy:
      matrix:
        node: [18]
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-node@v4
        with:
          node-version: ${{ matrix.node }}
          cache: npm
      - run: npm ci
      - run: npm run lint
      - run: npm test -- --coverage
      - name: Upload coverage
        uses: actions/upload-artifact@v4
        with:
          name: coverage-node-${{ matrix.node }}
          path: coverage/
'''),
    ("nginx-upstream", '''\
Replace the second upstream server with 10.0.0.12:9000 and allow request bodies up to 20m. \
Give back the whole nginx config.

upstream api_backend {
    server 10.0.0.11:9000;
    server 10.0.0.13:9000;
    keepalive 16;
}

server {
    listen 80;
    server_name shop.example.org;
    client_max_body_size 8m;

    location /static/ {
        root /srv/shop;
        expires 7d;
        add_header Cache-Control "public";
    }

    location /api/ {
        proxy_pass http://api_backend;
        proxy_set_header Host $host;
        proxy_set_header X-Real-IP $remote_addr;
        proxy_read_timeout 30s;
    }

    location / {
        try_files $uri /index.html;
    }
}
'''),
    ("dockerfile-base", '''\
Update this Dockerfile to build from python:3.12-slim. Return the full Dockerfile.

FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 \\
    PYTHONUNBUFFERED=1
WORKDIR /app

RUN apt-get update \\
    && apt-get install -y --no-install-recommends libpq5 \\
    && rm -rf /var/lib/apt/lists/*

COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt

COPY src/ ./src/
COPY migrations/ ./migrations/

RUN useradd --create-home appuser
USER appuser

EXPOSE 5000
CMD ["gunicorn", "--bind", "0.0.0.0:5000", "--workers", "3", "src.wsgi:app"]
'''),
]

REFACTOR: list[tuple[str, str]] = [
    ("python-rename", '''\
Rename `calc` to `order_total`, `l` to `lines`, `d` to `discount` and `s` to `subtotal`. \
Return the whole function and nothing else.

def calc(l, d, tax=0.2):
    s = 0
    for it in l:
        if it["qty"] <= 0:
            continue
        p = it["price"] * it["qty"]
        if it.get("sale"):
            p = p * 0.9
        s += p
    if d:
        s = s - min(d, s)
    t = s * tax
    return round(s + t, 2)
'''),
    ("javascript-async", '''\
Rewrite this function with async/await instead of the .then chain, keeping its behaviour. \
Return the whole function.

function loadProfile(userId) {
  return fetch(`/api/users/${userId}`)
    .then((res) => {
      if (!res.ok) {
        throw new Error(`user ${userId}: ${res.status}`);
      }
      return res.json();
    })
    .then((user) => {
      return fetch(`/api/teams/${user.teamId}`)
        .then((res) => res.json())
        .then((team) => ({ ...user, team }));
    })
    .catch((err) => {
      console.error("loadProfile failed", err);
      return null;
    });
}
'''),
    ("go-rename", '''\
Rename `proc` to `parseRecord` and the variable `parts` to `fields`. Return the complete \
Go function.

func proc(line string) (Record, error) {
	parts := strings.Split(line, ";")
	if len(parts) != 4 {
		return Record{}, fmt.Errorf("want 4 fields, got %d", len(parts))
	}
	id, err := strconv.Atoi(strings.TrimSpace(parts[0]))
	if err != nil {
		return Record{}, fmt.Errorf("bad id %q: %w", parts[0], err)
	}
	amount, err := strconv.ParseFloat(strings.TrimSpace(parts[2]), 64)
	if err != nil {
		return Record{}, fmt.Errorf("bad amount %q: %w", parts[2], err)
	}
	return Record{
		ID:     id,
		Name:   strings.TrimSpace(parts[1]),
		Amount: amount,
		Note:   strings.TrimSpace(parts[3]),
	}, nil
}
'''),
    ("rust-struct", '''\
Rename the struct `Acc` to `Account` and its field `bal` to `balance` everywhere. Return \
all of the code.

#[derive(Debug)]
pub struct Acc {
    pub owner: String,
    pub bal: i64,
    pub frozen: bool,
}

impl Acc {
    pub fn new(owner: &str) -> Self {
        Acc { owner: owner.to_string(), bal: 0, frozen: false }
    }

    pub fn deposit(&mut self, amount: i64) -> Result<i64, String> {
        if self.frozen {
            return Err(format!("account of {} is frozen", self.owner));
        }
        if amount <= 0 {
            return Err("deposit must be positive".into());
        }
        self.bal += amount;
        Ok(self.bal)
    }

    pub fn withdraw(&mut self, amount: i64) -> Result<i64, String> {
        if self.frozen || amount > self.bal {
            return Err("withdrawal refused".into());
        }
        self.bal -= amount;
        Ok(self.bal)
    }
}
'''),
    ("java-static", '''\
Rename `chk` to `isValidIsbn13`, its parameter `s` to `isbn`, and make the method static. \
Return the method whole.

public boolean chk(String s) {
    String digits = s.replace("-", "").replace(" ", "");
    if (digits.length() != 13) {
        return false;
    }
    int sum = 0;
    for (int i = 0; i < 13; i++) {
        char c = digits.charAt(i);
        if (!Character.isDigit(c)) {
            return false;
        }
        int d = c - '0';
        sum += (i % 2 == 0) ? d : d * 3;
    }
    return sum % 10 == 0;
}
'''),
    ("bash-local", '''\
Rename `do_it` to `backup_dir` and declare `src`, `dst`, `stamp`, `archive` and `count` with \
`local`. Return the whole shell function.

do_it() {
  src=$1
  dst=$2
  if [ ! -d "$src" ]; then
    echo "no such directory: $src" >&2
    return 1
  fi
  mkdir -p "$dst"
  stamp=$(date +%Y%m%d-%H%M%S)
  archive="$dst/backup-$stamp.tar.gz"
  tar -czf "$archive" -C "$src" .
  count=$(ls "$dst"/backup-*.tar.gz | wc -l)
  if [ "$count" -gt 7 ]; then
    ls -t "$dst"/backup-*.tar.gz | tail -n +8 | xargs rm -f
  fi
  echo "$archive"
}
'''),
]
