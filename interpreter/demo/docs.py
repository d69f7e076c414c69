"""Demo document store, embeddings and retrieval index (``docs.*``, ``embeddings.*``, ``index.*``).

What the document-ingestion example calls. Claim-check style: extracted text, chunks
and vectors stay in the demo database under keys (``text/<doc>/r<rev>``,
``chunks/<doc>/r<rev>``, ``vectors/<model>/chunks/<doc>/r<rev>``); outputs carry only
keys, counts and short previews. Extraction, chunking and embedding are keyed by their
inputs, so repeating them rewrites the same rows; index and status writes also run at
most once per ``ctx.idempotency_key``.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import re
from collections.abc import Callable
from typing import Any

from sealflow.core.errors import StepError
from sealflow.demo import store
from sealflow.execution.actions import action

EMBEDDING_MODELS = {"text-embedding-small": 8, "text-embedding-large": 16}
NAMESPACES = ("kb-public", "kb-internal")
TEXT_TYPES = ("text/html", "text/markdown", "text/plain")


def _document(conn: Any, document_id: Any, revision: Any) -> dict[str, Any]:
    row = conn.execute("SELECT * FROM documents WHERE document_id = ?", (str(document_id),)).fetchone()
    if row is None:
        raise StepError("invalid_request", f"no document {document_id!r} in the demo document store")
    if not isinstance(revision, int) or isinstance(revision, bool) or not 1 <= revision <= row["latest_revision"]:
        raise StepError("invalid_request", f"document {document_id!r} has no revision {revision!r} "
                        f"(revisions 1..{row['latest_revision']})")
    return dict(row)


def _blob(doc: dict[str, Any], revision: int) -> str:
    return f"blobs/{doc['document_id']}/r{revision}"


def _content(doc: dict[str, Any], revision: int) -> str:
    body: str = doc["body"]
    return body + ("" if revision == 1 else f"\n\nRevision {revision}.")


@action("docs.fetch", permissions=["docs:read"], effect="read")
def fetch(ctx: Any, document_id: str, revision: int) -> dict[str, Any]:
    """Metadata of a document revision: title, content_type, blob_key, source_url, size_bytes."""
    with store.connect() as conn:
        doc = _document(conn, document_id, revision)
    return {"document_id": document_id, "revision": revision, "title": doc["title"],
            "content_type": doc["content_type"], "blob_key": _blob(doc, revision), "source_url": doc["source_url"],
            "size_bytes": len(_content(doc, revision).encode())}


#: a document's text and its page count (None: not paged) from its record and its content
ToText = Callable[[dict[str, Any], str], tuple[str, int | None]]


def _extract(ctx: Any, document_id: str, revision: int, blob_key: str, extractor: str,
             to_text: ToText) -> dict[str, Any]:
    with store.connect(write=True) as conn:
        doc = _document(conn, document_id, revision)
        if blob_key != _blob(doc, revision):
            raise StepError("invalid_request", f"blob {blob_key!r} is not revision {revision} of {document_id!r}")
        text, pages = to_text(doc, _content(doc, revision))
        conn.execute("INSERT OR REPLACE INTO doc_texts VALUES (?, ?, ?, ?, ?)",
                     (document_id, revision, text, extractor, pages))
    out = {"document_id": document_id, "revision": revision, "text_key": f"text/{document_id}/r{revision}",
           "chars": len(text)}
    return out if pages is None else {**out, "pages": pages}


@action("docs.extract_pdf", permissions=["docs:read", "docs:write"], effect="write")
def extract_pdf(ctx: Any, document_id: str, revision: int, blob_key: str, ocr: bool = False) -> dict[str, Any]:
    """Extract the text of a PDF revision into the document store; returns text_key, chars, pages."""
    def to_text(doc: dict[str, Any], content: str) -> tuple[str, int | None]:
        if doc["content_type"] != "application/pdf":
            raise StepError("invalid_request", f"{document_id!r} is {doc['content_type']}, not a PDF")
        return content, max(1, math.ceil(len(content) / 1800))

    return _extract(ctx, document_id, revision, blob_key, "pdf+ocr" if ocr else "pdf", to_text)


@action("docs.extract_text", permissions=["docs:read", "docs:write"], effect="write")
def extract_text(ctx: Any, document_id: str, revision: int, blob_key: str, content_type: str) -> dict[str, Any]:
    """Extract plain text from an HTML, Markdown or text revision into the document store."""
    def to_text(doc: dict[str, Any], content: str) -> tuple[str, int | None]:
        if content_type not in TEXT_TYPES or content_type != doc["content_type"]:
            raise StepError("invalid_request", f"cannot extract text from {content_type!r} "
                            f"(document is {doc['content_type']}; text types: {', '.join(TEXT_TYPES)})")
        if content_type == "text/html":
            content = html.unescape(re.sub(r"<title>.*?</title>|<[^>]+>", " ", content))
        return re.sub(r"[ \t]+", " ", content).strip(), None

    return _extract(ctx, document_id, revision, blob_key, content_type, to_text)


@action("docs.chunk", permissions=["docs:read", "docs:write"], effect="write")
def chunk(ctx: Any, document_id: str, revision: int, max_tokens: int = 512, overlap: int = 0) -> dict[str, Any]:
    """Split the extracted text into chunks of about ``max_tokens`` (4 characters a token); returns
    chunks_key, chunk_count and a preview of the opening text."""
    if not isinstance(max_tokens, int) or max_tokens < 1 or not isinstance(overlap, int) \
            or not 0 <= overlap < max_tokens:
        raise StepError("invalid_request", "docs.chunk needs max_tokens >= 1 and 0 <= overlap < max_tokens")
    key = f"chunks/{document_id}/r{revision}"
    with store.connect(write=True) as conn:
        row = conn.execute("SELECT text FROM doc_texts WHERE document_id = ? AND revision = ?",
                           (document_id, revision)).fetchone()
        if row is None:
            raise StepError("invalid_request", f"no extracted text for {document_id!r} revision {revision}; "
                            "run docs.extract_pdf or docs.extract_text first")
        text, size, step = row["text"], max_tokens * 4, (max_tokens - overlap) * 4
        pieces = [text[i:i + size] for i in range(0, max(len(text) - overlap * 4, 1), step)]
        conn.execute("DELETE FROM doc_chunks WHERE chunks_key = ?", (key,))
        conn.executemany("INSERT INTO doc_chunks VALUES (?, ?, ?)", [(key, i, p) for i, p in enumerate(pieces)])
        for model in EMBEDDING_MODELS:  # vectors of an earlier chunking of this revision are stale now
            conn.execute("DELETE FROM vectors WHERE vectors_key = ?", (f"vectors/{model}/{key}",))
    preview = " ".join(text.split())[:200]
    # claim-check: the chunks stay here; a map over `chunks` (their positions) embeds them one by one
    return {"chunks_key": key, "chunk_count": len(pieces), "preview": preview, "chunks": list(range(len(pieces)))}


def _vector(model: str, text: str, dims: int) -> list[float]:
    digest = hashlib.sha256(f"{model}\0{text}".encode()).digest()
    raw = [(b - 127.5) / 127.5 for b in digest[:dims]]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [round(x / norm, 6) for x in raw]


@action("embeddings.create", permissions=["embeddings:invoke"], effect="read")
def create_embeddings(ctx: Any, chunks_key: str, model: str = "text-embedding-small",
                      batch_size: int = 64) -> dict[str, Any]:
    """Embed every chunk under ``chunks_key`` (deterministic pseudo-embeddings); returns vectors_key,
    count, dimensions, batches, model. No outside effect: vectors are cached under their key."""
    dims = EMBEDDING_MODELS.get(model)
    if dims is None:
        raise StepError("configuration", f"unknown embedding model {model!r}; known: {', '.join(EMBEDDING_MODELS)}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise StepError("invalid_request", "batch_size must be a positive integer")
    key = f"vectors/{model}/{chunks_key}"
    with store.connect(write=True) as conn:
        chunks = conn.execute("SELECT idx, text FROM doc_chunks WHERE chunks_key = ? ORDER BY idx",
                              (chunks_key,)).fetchall()
        if not chunks:
            raise StepError("invalid_request", f"no chunks under {chunks_key!r}; run docs.chunk first")
        conn.execute("DELETE FROM vectors WHERE vectors_key = ?", (key,))
        conn.executemany("INSERT INTO vectors VALUES (?, ?, ?)",
                         [(key, c["idx"], json.dumps(_vector(model, c["text"], dims))) for c in chunks])
    return {"vectors_key": key, "count": len(chunks), "dimensions": dims,
            "batches": math.ceil(len(chunks) / batch_size), "model": model}


@action("embeddings.embed_chunk", permissions=["embeddings:invoke"], effect="read")
def embed_chunk(ctx: Any, chunks_key: str, index: int, model: str = "text-embedding-small") -> dict[str, Any]:
    """Embed the chunk at ``index`` under ``chunks_key`` (one item of a ``map``); returns vectors_key, index,
    dimensions. Its vector is stored under (vectors_key, index): a retry or a redelivery writes it again."""
    dims = EMBEDDING_MODELS.get(model)
    if dims is None:
        raise StepError("configuration", f"unknown embedding model {model!r}; known: {', '.join(EMBEDDING_MODELS)}")
    key = f"vectors/{model}/{chunks_key}"
    with store.connect(write=True) as conn:
        got = conn.execute("SELECT text FROM doc_chunks WHERE chunks_key = ? AND idx = ?",
                           (chunks_key, index)).fetchone()
        if got is None:
            raise StepError("invalid_request", f"no chunk {index!r} under {chunks_key!r}; run docs.chunk first")
        conn.execute("DELETE FROM vectors WHERE vectors_key = ? AND idx = ?", (key, index))
        conn.execute("INSERT INTO vectors VALUES (?, ?, ?)",
                     (key, index, json.dumps(_vector(model, got["text"], dims))))
    return {"vectors_key": key, "index": index, "dimensions": dims}


def _namespace(namespace: Any) -> str:
    if not isinstance(namespace, str) or namespace not in NAMESPACES:
        raise StepError("invalid_request", f"unknown index namespace {namespace!r}; the demo index has "
                        f"{', '.join(NAMESPACES)}")
    return namespace


@action("index.upsert", permissions=["index:write"], effect="write")
def upsert(ctx: Any, namespace: str, document_id: str, revision: int, vectors_key: str,
           metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write a revision's vectors and metadata into the index namespace (replacing that revision's
    entries); returns namespace, document_id, revision, upserted. Once per idempotency key."""
    _namespace(namespace)

    def perform(conn: Any) -> dict[str, Any]:
        vectors = conn.execute("SELECT idx, vector FROM vectors WHERE vectors_key = ? ORDER BY idx",
                               (vectors_key,)).fetchall()
        if not vectors:
            raise StepError("invalid_request", f"no vectors under {vectors_key!r}; run embeddings.create first")
        conn.execute("DELETE FROM index_entries WHERE namespace = ? AND document_id = ? AND revision = ?",
                     (namespace, document_id, revision))
        conn.executemany("INSERT INTO index_entries VALUES (?, ?, ?, ?, ?, ?)",
                         [(namespace, document_id, revision, v["idx"], v["vector"], store.dumps(metadata or {}))
                          for v in vectors])
        return {"namespace": namespace, "document_id": document_id, "revision": revision, "upserted": len(vectors)}

    args = {"namespace": namespace, "document_id": document_id, "revision": revision, "vectors_key": vectors_key}
    return store.once(ctx, "index.upsert", args, perform)


@action("index.delete_stale", permissions=["index:write"], effect="write")
def delete_stale(ctx: Any, namespace: str, document_id: str, keep_revision: int) -> dict[str, Any]:
    """Delete the document's entries from revisions older than ``keep_revision``; returns deleted."""
    _namespace(namespace)

    def perform(conn: Any) -> dict[str, Any]:
        cur = conn.execute("DELETE FROM index_entries WHERE namespace = ? AND document_id = ? AND revision < ?",
                           (namespace, document_id, keep_revision))
        return {"namespace": namespace, "document_id": document_id, "kept_revision": keep_revision,
                "deleted": cur.rowcount}

    args = {"namespace": namespace, "document_id": document_id, "keep_revision": keep_revision}
    return store.once(ctx, "index.delete_stale", args, perform)


@action("docs.set_status", permissions=["docs:write"], effect="write")
def set_status(ctx: Any, document_id: str, revision: int, status: str, detail: str = "") -> dict[str, Any]:
    """Record the indexing status of a document revision (e.g. indexed, unsupported)."""
    if not isinstance(status, str) or not re.match(r"^[a-z][a-z_]{0,31}$", status):
        raise StepError("invalid_request", f"status {status!r} must be a lower-case word such as 'indexed'")

    def perform(conn: Any) -> dict[str, Any]:
        _document(conn, document_id, revision)
        conn.execute("INSERT OR REPLACE INTO doc_status VALUES (?, ?, ?, ?, ?)",
                     (document_id, revision, status, detail, store.run_id(ctx)))
        return {"document_id": document_id, "revision": revision, "status": status, "detail": detail}

    args = {"document_id": document_id, "revision": revision, "status": status, "detail": detail}
    return store.once(ctx, "docs.set_status", args, perform)
