// The D1 Proxy Worker: the collector's only way into D1 (seed section 2).
//
//   POST /query {sql, params}                 -> db.prepare(sql).bind(...params).all()
//   POST /batch {statements: [{sql, params}]} -> db.batch([...]), one transaction
//   POST /exec  {sql}                         -> db.exec(sql), administration only
//
// Every request needs "Authorization: Bearer <D1_PROXY_TOKEN>". Answers are JSON:
// {"results": ...} on success, {"error": {"kind", "message"}} otherwise. Blobs travel as
// {"base64": "..."} in both directions because JSON has no bytes.

const DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024;
const ENDPOINTS = new Set(["/query", "/batch", "/exec"]);
const encoder = new TextEncoder();

export default {
  async fetch(request, env) {
    if (!env.D1_PROXY_TOKEN) {
      return failure(500, "config", "the Worker secret D1_PROXY_TOKEN is not set");
    }
    if (!(await authorized(request.headers.get("Authorization"), env.D1_PROXY_TOKEN))) {
      return new Response(JSON.stringify({ error: { kind: "unauthorized", message: "unauthorized" } }), {
        status: 401,
        headers: { "Content-Type": "application/json", "WWW-Authenticate": "Bearer" },
      });
    }
    const path = new URL(request.url).pathname;
    if (!ENDPOINTS.has(path)) return failure(404, "not_found", `no endpoint ${path}; use /query, /batch or /exec`);
    if (request.method !== "POST") return failure(405, "method", `${path} accepts POST only`);

    const limit = Number(env.MAX_BODY_BYTES) || DEFAULT_MAX_BODY_BYTES;
    let body;
    try {
      body = await readJson(request, limit);
    } catch (problem) {
      if (problem instanceof RequestProblem) return failure(problem.status, problem.kind, problem.message);
      throw problem;
    }
    try {
      if (path === "/query") return await query(env.DB, body);
      if (path === "/batch") return await batch(env.DB, body);
      return await exec(env.DB, body);
    } catch (problem) {
      if (problem instanceof RequestProblem) return failure(problem.status, problem.kind, problem.message);
      return d1Failure(problem);
    }
  },
};

async function query(db, body) {
  const { sql, params } = statementOf(body, "body");
  const result = await db.prepare(sql).bind(...params).all();
  return success({ results: result.results.map(encodeRow), meta: metaOf(result) });
}

async function batch(db, body) {
  if (!isObject(body) || !Array.isArray(body.statements)) {
    throw new RequestProblem(400, "bad_request", "body must be {\"statements\": [{\"sql\", \"params\"}, ...]}");
  }
  if (body.statements.length === 0) return success({ results: [], meta: [] });
  const prepared = body.statements.map((item, index) => {
    const { sql, params } = statementOf(item, `statements[${index}]`);
    return db.prepare(sql).bind(...params);
  });
  const results = await db.batch(prepared);
  return success({ results: results.map((r) => r.results.map(encodeRow)), meta: results.map(metaOf) });
}

async function exec(db, body) {
  if (!isObject(body) || typeof body.sql !== "string" || body.sql.trim() === "") {
    throw new RequestProblem(400, "bad_request", "body must be {\"sql\": \"...\"} with non-empty sql");
  }
  if ("params" in body) throw new RequestProblem(400, "bad_request", "/exec takes no params; use /query");
  const result = await db.exec(body.sql);
  return success({ results: [], meta: { count: result.count, duration: result.duration } });
}

function statementOf(value, where) {
  if (!isObject(value)) throw new RequestProblem(400, "bad_request", `${where} must be an object {"sql", "params"}`);
  if (typeof value.sql !== "string" || value.sql.trim() === "") {
    throw new RequestProblem(400, "bad_request", `${where}.sql must be a non-empty string`);
  }
  const raw = value.params ?? [];
  if (!Array.isArray(raw)) throw new RequestProblem(400, "bad_request", `${where}.params must be an array`);
  const params = raw.map((param, index) => decodeParam(param, `${where}.params[${index}]`));
  return { sql: value.sql, params };
}

function decodeParam(param, where) {
  if (param === null || typeof param === "string" || typeof param === "boolean") return param;
  if (typeof param === "number") {
    if (!Number.isFinite(param)) throw new RequestProblem(400, "bad_request", `${where} is not a finite number`);
    return param;
  }
  if (isObject(param) && typeof param.base64 === "string" && Object.keys(param).length === 1) {
    try {
      return Uint8Array.from(atob(param.base64), (c) => c.charCodeAt(0));
    } catch {
      throw new RequestProblem(400, "bad_request", `${where}.base64 is not valid base64`);
    }
  }
  throw new RequestProblem(400, "bad_request", `${where} must be a string, number, boolean, null or {"base64": "..."}`);
}

// D1 hands blob columns back as arrays of byte values (or buffers); SQLite has no other array type.
function encodeRow(row) {
  const out = {};
  for (const [name, value] of Object.entries(row)) {
    if (Array.isArray(value) || value instanceof ArrayBuffer || ArrayBuffer.isView(value)) {
      const bytes = Array.isArray(value)
        ? Uint8Array.from(value)
        : ArrayBuffer.isView(value)
          ? new Uint8Array(value.buffer, value.byteOffset, value.byteLength)
          : new Uint8Array(value);
      let binary = "";
      for (const byte of bytes) binary += String.fromCharCode(byte);
      out[name] = { base64: btoa(binary) };
    } else {
      out[name] = value;
    }
  }
  return out;
}

function metaOf(result) {
  const meta = result.meta ?? {};
  return { changes: meta.changes ?? 0, last_row_id: meta.last_row_id ?? null, duration: meta.duration ?? 0 };
}

// Keeps at most `limit` bytes, whatever Content-Length claims, so a chunked upload cannot exceed
// it. A body over the limit is still read to its end (and dropped) before the 413: left unread,
// it broke the client's keep-alive connection, and its next request failed on it.
async function readJson(request, limit) {
  if (!request.body) throw new RequestProblem(400, "bad_request", "empty body; send JSON");
  const reader = request.body.getReader();
  const declared = Number(request.headers.get("Content-Length") ?? "0");
  const chunks = [];
  let size = 0;
  let over = declared > limit;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    over = over || size > limit;
    if (!over) chunks.push(value);
  }
  if (over) {
    chunks.length = 0;
    throw tooLarge(limit);
  }
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  try {
    return JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch (problem) {
    throw new RequestProblem(400, "bad_json", `body is not valid UTF-8 JSON: ${problem.message}`);
  }
}

function tooLarge(limit) {
  return new RequestProblem(413, "too_large", `request body over ${limit} bytes; split the batch`);
}

// Hash both sides first so the comparison takes the same time whatever the lengths.
async function authorized(header, token) {
  const match = /^Bearer (.+)$/.exec(header ?? "");
  if (!match) return false;
  const [given, wanted] = await Promise.all(
    [match[1], token].map((text) => crypto.subtle.digest("SHA-256", encoder.encode(text))),
  );
  return crypto.subtle.timingSafeEqual(given, wanted);
}

const SQL_MISTAKE = new RegExp(
  [
    "SQLITE_(ERROR|RANGE|MISMATCH|AUTH)", "D1_(TYPE|COLUMN_NOTFOUND|EXEC)_ERROR", "syntax error", "no such",
    "too many SQL variables", "Wrong number of parameter bindings", "not supported", "Error in line \\d+",
    "BEGIN TRANSACTION or SAVEPOINT",
  ].join("|"),
  "i",
);

// SQL mistakes are the caller's (4xx); anything else is D1 or the platform failing (5xx).
function d1Failure(problem) {
  const message = String(problem?.cause?.message ?? problem?.message ?? problem);
  if (/SQLITE_CONSTRAINT|constraint failed/i.test(message)) return failure(409, "constraint", message);
  if (/SQLITE_TOOBIG|too big|too large/i.test(message)) return failure(413, "too_large", message);
  if (SQL_MISTAKE.test(message)) return failure(400, "sql", message);
  return failure(500, "d1", message);
}

class RequestProblem extends Error {
  constructor(status, kind, message) {
    super(message);
    this.status = status;
    this.kind = kind;
  }
}

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function success(payload) {
  return new Response(JSON.stringify(payload), { status: 200, headers: { "Content-Type": "application/json" } });
}

function failure(status, kind, message) {
  return new Response(JSON.stringify({ error: { kind, message } }), {
    status,
    headers: { "Content-Type": "application/json" },
  });
}
