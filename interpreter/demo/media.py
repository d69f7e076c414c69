"""Demo image pipeline actions (``images.*``, ``storage.*``, ``notifications.send``).

What the image-upload-pipeline example calls. Uploads are seeded (:mod:`.seed`); the
"pixels" are never read: sizes, hashes and keys are derived from the upload record,
so everything is deterministic. Quarantine, storage, publication and notifications
are rows in the demo database; write and irreversible actions run at most once per
``ctx.idempotency_key``. URLs use the reserved ``.invalid`` domain: nothing is fetched.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sealflow.core.errors import StepError
from sealflow.demo import store
from sealflow.execution.actions import action

CDN = "https://cdn.demo.invalid"
PREVIEW = "https://media.demo.invalid/processing"
NOTIFICATION_TEMPLATES = ("image_published", "image_rejected", "report_ready")
_EXT = {"image/jpeg": "jpg", "image/png": "png", "image/webp": "webp"}


def _sha256(object_key: str) -> str:
    return hashlib.sha256(f"demo-upload:{object_key}".encode()).hexdigest()


def _upload(conn: Any, object_key: Any) -> dict[str, Any]:
    row = conn.execute("SELECT * FROM uploads WHERE object_key = ?", (str(object_key),)).fetchone()
    if row is None:
        raise StepError("invalid_request", f"no object {object_key!r} in the demo upload bucket")
    return dict(row)


def _quarantined(conn: Any, quarantine_key: Any) -> dict[str, Any]:
    row = conn.execute("SELECT * FROM quarantine WHERE quarantine_key = ?", (str(quarantine_key),)).fetchone()
    if row is None:
        raise StepError("invalid_request", f"nothing in quarantine under {quarantine_key!r}")
    return dict(row)


@action("images.validate", permissions=["uploads:read"], effect="read")
def validate(ctx: Any, object_key: str, declared_type: str, max_bytes: int, max_pixels: int) -> dict[str, Any]:
    """Check an upload's real type and size against the declared type and the limits;
    returns sha256, width, height, bytes, content_type."""
    with store.connect() as conn:
        up = _upload(conn, object_key)
    if up["content_type"] != declared_type:
        raise StepError("invalid_request", f"{object_key!r} was declared {declared_type} but is {up['content_type']}")
    if up["bytes"] > max_bytes:
        raise StepError("invalid_request", f"{object_key!r} has {up['bytes']} bytes; the limit is {max_bytes}")
    if up["width"] * up["height"] > max_pixels:
        raise StepError("invalid_request", f"{object_key!r} has {up['width']}x{up['height']} pixels; "
                        f"the limit is {max_pixels}")
    return {"object_key": object_key, "sha256": _sha256(object_key), "width": up["width"], "height": up["height"],
            "bytes": up["bytes"], "content_type": up["content_type"]}


@action("images.quarantine", permissions=["quarantine:write"], effect="write")
def quarantine(ctx: Any, image_id: str, object_key: str, sha256: str) -> dict[str, Any]:
    """Move an upload into quarantine (nothing reads its pixels before the scan); returns quarantine_key."""
    def perform(conn: Any) -> dict[str, Any]:
        _upload(conn, object_key)
        if sha256 != _sha256(object_key):
            raise StepError("invalid_request", f"sha256 of {object_key!r} changed since it was validated")
        key = f"quarantine/{image_id}/{sha256[:16]}"
        conn.execute("INSERT OR REPLACE INTO quarantine VALUES (?, ?, ?, ?, 'held', NULL, NULL)",
                     (key, image_id, object_key, sha256))
        return {"quarantine_key": key, "image_id": image_id, "sha256": sha256}

    return store.once(ctx, "images.quarantine", {"image_id": image_id, "object_key": object_key, "sha256": sha256},
                      perform)


def _refuse_malware(conn: Any, quarantine_key: str) -> dict[str, Any]:
    held = _quarantined(conn, quarantine_key)
    signature = _upload(conn, held["object_key"])["malware"]
    if signature:
        raise StepError("policy_denied", f"malware found in {quarantine_key!r}: {signature}")
    return held


@action("images.scan", permissions=["malware:scan"], effect="read")
def scan(ctx: Any, quarantine_key: str) -> dict[str, Any]:
    """Scan a quarantined upload; malware is ``policy_denied`` (never retried). Returns the verdict."""
    with store.connect() as conn:
        _refuse_malware(conn, quarantine_key)
    return {"quarantine_key": quarantine_key, "verdict": "clean", "engine": "demo-scanner 1.0"}


def _resize(width: int, height: int, variant: dict[str, Any]) -> tuple[int, int]:
    # process() has checked the variant: width an int > 0, height None or an int > 0
    w: int = variant["width"]
    h: int | None = variant.get("height")
    fit = variant.get("fit", "inside")
    if fit == "cover":
        return w, h or w
    scale = min(w / width, (h / height) if h else 1.0, 1.0)
    return max(1, round(width * scale)), max(1, round(height * scale))


@action("images.process", permissions=["images:process"], effect="write")
def process(ctx: Any, quarantine_key: str, variants: list[Any], strip_metadata: bool = True) -> dict[str, Any]:
    """Render the requested variants (``{name, width, height?, fit: cover|inside}``) of a scanned upload;
    returns variants (name, key, width, height, bytes) and a preview_url."""
    if not isinstance(variants, list) or not variants:
        raise StepError("invalid_request", "images.process needs a non-empty list of variants")
    for v in variants:
        ok = isinstance(v, dict) and isinstance(v.get("name"), str) and isinstance(v.get("width"), int) \
            and v["width"] > 0 and v.get("fit", "inside") in ("cover", "inside") \
            and (v.get("height") is None or (isinstance(v["height"], int) and v["height"] > 0))
        if not ok:
            raise StepError("invalid_request", f"bad variant {v!r}: need name, width > 0, optional height > 0 "
                            "and fit cover|inside")
    with store.connect(write=True) as conn:
        held = _refuse_malware(conn, quarantine_key)
        up = _upload(conn, held["object_key"])
        ext = _EXT.get(up["content_type"], "bin")
        out = []
        for v in variants:
            w, h = _resize(up["width"], up["height"], v)
            key = f"processing/{held['image_id']}/{held['sha256'][:12]}/{v['name']}.{ext}"
            size = max(1, w * h // 7)
            conn.execute("INSERT OR REPLACE INTO processed VALUES (?, ?, ?, ?, ?, ?)",
                         (quarantine_key, v["name"], key, w, h, size))
            out.append({"name": v["name"], "key": key, "width": w, "height": h, "bytes": size})
    preview = next((v for v in out if v["name"] == "medium"), out[0])
    return {"variants": out, "preview_url": f"{PREVIEW}/{preview['key'].split('/', 1)[1]}",
            "metadata_stripped": bool(strip_metadata)}


@action("storage.put", permissions=["storage:write"], effect="irreversible")
def put(ctx: Any, image_id: str, version: str, variants: list[Any],
        metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """Store the processed variants and their metadata as a version of the image; returns keys."""
    if not isinstance(variants, list) or not all(isinstance(v, dict) and "name" in v for v in variants):
        raise StepError("invalid_request", "storage.put needs the variants from images.process")

    def perform(conn: Any) -> dict[str, Any]:
        keys = []
        for v in variants:
            ext = str(v.get("key", "x.bin")).rsplit(".", 1)[-1]
            key = f"images/{image_id}/{str(version)[:12]}/{v['name']}.{ext}"
            conn.execute("INSERT OR REPLACE INTO stored_images VALUES (?, ?, ?, ?, ?)",
                         (image_id, version, v["name"], key, store.dumps(metadata or {})))
            keys.append(key)
        return {"image_id": image_id, "version": version, "keys": keys}

    return store.once(ctx, "storage.put", {"image_id": image_id, "version": version, "variants": variants,
                                            "metadata": metadata}, perform)


@action("storage.delete", permissions=["storage:write"], effect="write")
def delete(ctx: Any, image_id: str, version: str) -> dict[str, Any]:
    """Delete a stored version of the image (the compensation of ``storage.put``); returns deleted."""
    with store.connect(write=True) as conn:
        cur = conn.execute("DELETE FROM stored_images WHERE image_id = ? AND version = ?", (image_id, version))
    return {"image_id": image_id, "version": version, "deleted": cur.rowcount}


@action("images.publish", permissions=["cdn:publish"], effect="irreversible")
def publish(ctx: Any, image_id: str, version: str, keys: list[Any], alt_text: str) -> dict[str, Any]:
    """Publish stored variants on the CDN; returns url (the largest variant), urls, publication_id."""
    if not isinstance(keys, list) or not keys:
        raise StepError("invalid_request", "images.publish needs the keys returned by storage.put")

    def perform(conn: Any) -> dict[str, Any]:
        stored = {r["key"] for r in conn.execute("SELECT key FROM stored_images WHERE image_id = ? AND version = ?",
                                                 (image_id, version))}
        missing = [k for k in keys if k not in stored]
        if missing:
            raise StepError("invalid_request", f"not stored, cannot publish: {', '.join(map(str, missing))}")
        urls = [f"{CDN}/{k}" for k in keys]
        n, publication_id = store.next_id(conn, "publications", "pub")
        conn.execute("INSERT INTO publications VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (n, publication_id, image_id, version, urls[-1], alt_text, store.dumps(keys), store.run_id(ctx),
                      store.idempotency_key(ctx)))
        return {"publication_id": publication_id, "image_id": image_id, "url": urls[-1], "urls": urls}

    return store.once(ctx, "images.publish", {"image_id": image_id, "version": version, "keys": keys,
                                               "alt_text": alt_text}, perform)


@action("images.reject", permissions=["quarantine:write"], effect="write")
def reject(ctx: Any, image_id: str, quarantine_key: str, reason: str, retain_days: int = 90) -> dict[str, Any]:
    """Mark a quarantined upload rejected and keep it ``retain_days`` for forensics."""
    def perform(conn: Any) -> dict[str, Any]:
        _quarantined(conn, quarantine_key)
        conn.execute("UPDATE quarantine SET status = 'rejected', reason = ?, retain_days = ? WHERE quarantine_key = ?",
                     (reason, retain_days, quarantine_key))
        return {"image_id": image_id, "quarantine_key": quarantine_key, "status": "rejected",
                "reason": reason, "retain_days": retain_days}

    return store.once(ctx, "images.reject", {"image_id": image_id, "quarantine_key": quarantine_key,
                                              "reason": reason, "retain_days": retain_days}, perform)


@action("notifications.send", permissions=["notify:send"], effect="irreversible")
def notify(ctx: Any, user_id: str, template: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    """Send an in-app notification (into the demo notifications table); returns notification_id."""
    if template not in NOTIFICATION_TEMPLATES:
        raise StepError("invalid_request", f"unknown notification template {template!r}; known: "
                        f"{', '.join(NOTIFICATION_TEMPLATES)}")
    if not isinstance(user_id, str) or not user_id:
        raise StepError("invalid_request", "notifications.send needs a user_id")

    def perform(conn: Any) -> dict[str, Any]:
        n, notification_id = store.next_id(conn, "notifications", "ntf")
        conn.execute("INSERT INTO notifications VALUES (?, ?, ?, ?, ?, ?, ?)",
                     (n, notification_id, user_id, template, store.dumps(data or {}), store.run_id(ctx),
                      store.idempotency_key(ctx)))
        return {"notification_id": notification_id}

    return store.once(ctx, "notifications.send", {"user_id": user_id, "template": template, "data": data}, perform)


# -- the image-generation example: a provider that calls back, a scanner that sends an event ----------------

RENDERER = "https://render.demo.invalid"


@action("images.generate", permissions=["images:generate"], effect="write")
def generate(ctx: Any, prompt: str, size: str = "1024x1024") -> dict[str, Any]:
    """Queue a render at the demo provider, which calls back when the image is ready (the step declares
    ``callback:``): the provider keeps the callback's URL and token in its queue (``render_jobs``); returns
    ``{job_id}`` at once. Once per ``ctx.idempotency_key``."""
    if ctx.callback is None:
        raise StepError("configuration", "images.generate is called back: its step needs callback: {timeout: ...}")
    job_id = "job_" + hashlib.sha256(f"{ctx.idempotency_key or ctx.run_id}:{prompt}".encode()).hexdigest()[:12]
    with store.connect(write=True) as conn:
        conn.execute("INSERT INTO render_jobs VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (idempotency_key) DO UPDATE "
                     "SET callback_url = excluded.callback_url, callback_token = excluded.callback_token",
                     (job_id, prompt, size, ctx.callback.url, ctx.callback.token, ctx.run_id,
                      ctx.idempotency_key or job_id))
    return {"job_id": job_id}


@action("images.request_scan", permissions=["malware:scan"], effect="write")
def request_scan(ctx: Any, image_url: str) -> dict[str, Any]:
    """Ask the demo scanner to scan ``image_url``; it answers later with a signed ``scan.finished`` event from
    the ``scanner`` source (``{image_url, clean}``). Returns ``{scan_id}``; once per ``ctx.idempotency_key``."""
    scan_id = "scan_" + hashlib.sha256(f"{ctx.idempotency_key or ctx.run_id}:{image_url}".encode()).hexdigest()[:12]
    with store.connect(write=True) as conn:
        conn.execute("INSERT INTO scan_requests VALUES (?, ?, ?, ?) ON CONFLICT (idempotency_key) DO NOTHING",
                     (scan_id, image_url, ctx.run_id, ctx.idempotency_key or scan_id))
    return {"scan_id": scan_id}
