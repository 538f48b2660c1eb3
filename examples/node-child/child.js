#!/usr/bin/env node
// A tether child in JavaScript: wire protocol v1 on stdin/stdout, no npm dependencies.
//
// Written from docs/protocol.md and protocol/schema.json only. It runs a small agent of its own:
// each model turn is asked of the parent (`model/complete`); the model may call `list_dir`,
// `read_file` (both confined to the run's workspace) and `complete`. Progress goes out as
// `agent/event` notifications numbered from 0 per run. A run started with `continuable: true`
// is kept when it ends, and `agent/message` continues it on its own transcript.
//
//   node child.js [--max-message-bytes N]
//
// A testing hook, so a parent can watch a child die mid-run: a run whose prompt is exactly
// `CRASH:exit` exits with status 3, and `CRASH:abort` calls process.abort() (SIGABRT).
"use strict";

const fs = require("node:fs");
const path = require("node:path");

const PROTOCOL_VERSION = 1;
const SUPPORTED_VERSIONS = [1];
const DEFAULT_MAX_MESSAGE_BYTES = 33554432;
const HEARTBEAT_MS = 2000;
const PREVIEW_CHARS = 8000;
const READ_LIMIT_BYTES = 256 * 1024;

const E = {
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL_ERROR: -32603,
  NOT_INITIALIZED: -32000,
  ALREADY_INITIALIZED: -32001,
  UNSUPPORTED_VERSION: -32002,
  UNKNOWN_RUN: -32003,
  RUN_BUSY: -32004,
  SHUTTING_DOWN: -32005,
  MESSAGE_TOO_LARGE: -32006,
  WRONG_FRAMING: -32007,
};

// --- stdout is the wire: nothing else may write there ----------------------------------------

const wire = process.stdout;
for (const name of ["log", "info", "debug", "dir", "table"]) {
  console[name] = (...args) => console.error(...args);
}
const log = (...args) => console.error("node-child:", ...args);

function readOption(name, fallback) {
  const i = process.argv.indexOf(name);
  if (i < 0) return fallback;
  const n = Number(process.argv[i + 1]);
  if (!Number.isInteger(n) || n < 1) {
    log(`${name} needs a positive integer`);
    process.exit(2);
  }
  return n;
}

const readCap = readOption("--max-message-bytes", DEFAULT_MAX_MESSAGE_BYTES);
let peerCap = DEFAULT_MAX_MESSAGE_BYTES; // the parent's reader cap, from initialize

// --- writing ---------------------------------------------------------------------------------

class TooLarge extends Error {}

function send(message) {
  const line = JSON.stringify(message);
  const size = Buffer.byteLength(line);
  if (size > peerCap) {
    throw new TooLarge(`message of ${size} bytes passes the parent's ${peerCap}-byte cap`);
  }
  // One write per message; on Linux, writes to a pipe on stdout are synchronous in Node.
  wire.write(line + "\n");
}

function respond(id, result) {
  try {
    send({ jsonrpc: "2.0", id, result });
  } catch (err) {
    if (!(err instanceof TooLarge)) throw err;
    respondError(id, E.MESSAGE_TOO_LARGE, `the response passes the parent's ${peerCap}-byte cap`);
  }
}

function respondError(id, code, message, data) {
  const error = data === undefined ? { code, message } : { code, message, data };
  send({ jsonrpc: "2.0", id, error });
}

function notify(method, params) {
  send({ jsonrpc: "2.0", method, params });
}

// --- our own requests to the parent ----------------------------------------------------------

let nextId = 0;
const pending = new Map(); // id -> {resolve, reject}

class RemoteError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

function request(method, params) {
  const id = ++nextId;
  return new Promise((resolve, reject) => {
    try {
      send({ jsonrpc: "2.0", id, method, params });
    } catch (err) {
      reject(err);
      return;
    }
    pending.set(id, { resolve, reject });
  });
}

function forget(id) {
  pending.delete(id);
}

function deliver(msg) {
  if (msg.id === null) {
    log(`the parent reported an error: ${msg.error && msg.error.message}`);
    return;
  }
  const slot = pending.get(msg.id);
  if (!slot) {
    log(`dropping a reply to unknown or abandoned request ${JSON.stringify(msg.id)}`);
    return;
  }
  pending.delete(msg.id);
  if ("error" in msg) slot.reject(new RemoteError(msg.error.code, String(msg.error.message)));
  else slot.resolve(msg.result);
}

// --- params validation (the types of docs/protocol.md, "Message reference") -------------------

class InvalidParams extends Error {}

const isObject = (v) => typeof v === "object" && v !== null && !Array.isArray(v);
const T = {
  string: (v) => typeof v === "string",
  integer: (v) => Number.isInteger(v),
  boolean: (v) => typeof v === "boolean",
  object: isObject,
  stringOrNull: (v) => v === null || typeof v === "string",
  strings: (v) => Array.isArray(v) && v.every((s) => typeof s === "string"),
  stringsOrNull: (v) => v === null || (Array.isArray(v) && v.every((s) => typeof s === "string")),
  oneOf: (...values) => (v) => values.includes(v),
};

function check(where, value, fields) {
  if (!isObject(value)) throw new InvalidParams(`${where} must be an object`);
  for (const [name, [test, required, nested]] of Object.entries(fields)) {
    if (!(name in value)) {
      if (required) throw new InvalidParams(`${where}.${name} is required`);
      continue;
    }
    if (nested) {
      nested(`${where}.${name}`, value[name]);
    } else if (!test(value[name])) {
      throw new InvalidParams(`${where}.${name} has the wrong type`);
    }
  }
  return value;
}

const toolCall = (where, v) =>
  check(where, v, { id: [T.string, true], name: [T.string, true], arguments: [T.object, false] });
const arrayOf = (item) => (where, v) => {
  if (!Array.isArray(v)) throw new InvalidParams(`${where} must be an array`);
  v.forEach((x, i) => item(`${where}[${i}]`, x));
};
const chatMessage = (where, v) =>
  check(where, v, {
    role: [T.oneOf("system", "user", "assistant", "tool"), true],
    content: [T.string, false],
    toolCalls: [null, false, arrayOf(toolCall)],
    toolCallId: [T.stringOrNull, false],
  });
const agentDefinition = (where, v) =>
  check(where, v, {
    type: [T.string, false],
    description: [T.string, false],
    model: [T.stringOrNull, false],
    maxIterations: [T.integer, false],
    stopConditions: [T.strings, false],
    tools: [T.stringsOrNull, false],
    compactionModel: [T.stringOrNull, false],
    instructions: [T.string, false],
    readOnly: [T.boolean, false],
    tokenBudget: [(x) => x === null || Number.isInteger(x), false],
  });

const PARAMS = {
  initialize: (p) =>
    check("params", p, {
      protocolVersion: [T.integer, true],
      clientInfo: [null, true, (w, v) => check(w, v, { name: [T.string, true], version: [T.string, false] })],
      capabilities: [null, false, (w, v) => check(w, v, { modelBroker: [T.boolean, false], toolApproval: [T.boolean, false] })],
      maxMessageBytes: [T.integer, false],
    }),
  ping: (p) => check("params", p, {}),
  "agent/run": (p) =>
    check("params", p, {
      runId: [T.string, true],
      prompt: [T.string, true],
      agent: [null, false, agentDefinition],
      description: [T.string, false],
      workspace: [T.string, false],
      history: [null, false, arrayOf(chatMessage)],
      continuable: [T.boolean, false],
    }),
  "agent/message": (p) => check("params", p, { runId: [T.string, true], message: [T.string, true] }),
  "agent/cancel": (p) => check("params", p, { runId: [T.string, true], reason: [T.string, false] }),
  shutdown: null, // no params
  exit: null,
};

function decodeParams(method, params) {
  const validate = PARAMS[method];
  if (validate === null) {
    const empty = params === undefined || (Array.isArray(params) ? params.length === 0 : Object.keys(params).length === 0);
    if (!empty) throw new InvalidParams(`${method} takes no params`);
    return null;
  }
  return validate(params === undefined ? {} : params);
}

// --- the session -------------------------------------------------------------------------------

const session = {
  initialized: false,
  shuttingDown: false,
  parentCapabilities: { modelBroker: true, toolApproval: true },
};
const runs = new Map(); // runId -> Run, while live
const kept = new Map(); // runId -> Run, finished and continuable (for agent/message)

const REQUESTS = {
  initialize: async (p) => {
    if (session.initialized) throw new RemoteError(E.ALREADY_INITIALIZED, "already initialized");
    if (!SUPPORTED_VERSIONS.includes(p.protocolVersion)) {
      const err = new RemoteError(
        E.UNSUPPORTED_VERSION,
        `protocol version ${p.protocolVersion} is not supported; this child speaks ${SUPPORTED_VERSIONS.join(", ")}`,
      );
      err.data = { supportedVersions: SUPPORTED_VERSIONS };
      throw err;
    }
    if ("maxMessageBytes" in p) {
      if (p.maxMessageBytes < 1) throw new InvalidParams("params.maxMessageBytes must be positive");
      peerCap = p.maxMessageBytes;
    }
    session.parentCapabilities = { modelBroker: true, toolApproval: true, ...(p.capabilities || {}) };
    session.initialized = true;
    return {
      protocolVersion: PROTOCOL_VERSION,
      serverInfo: { name: "tether-node-child", version: "0.1.0" },
      pid: process.pid,
      capabilities: { agentRun: true, agentMessage: true, tools: TOOL_NAMES },
      maxMessageBytes: readCap,
    };
  },
  ping: async () => ({}),
  "agent/run": async (p) => {
    if (session.shuttingDown) throw new RemoteError(E.SHUTTING_DOWN, "the child is shutting down: no new runs");
    if (runs.has(p.runId) || kept.has(p.runId)) throw new RemoteError(E.RUN_BUSY, `run ${p.runId} is already in use`);
    const run = new Run(p);
    runs.set(p.runId, run);
    try {
      return await run.execute(() => run.loop());
    } finally {
      runs.delete(p.runId);
      if (p.continuable === true) kept.set(p.runId, run);
    }
  },
  "agent/message": async (p) => {
    if (session.shuttingDown) throw new RemoteError(E.SHUTTING_DOWN, "the child is shutting down: no new runs");
    if (runs.has(p.runId)) throw new RemoteError(E.RUN_BUSY, `run ${p.runId} is still running`);
    const run = kept.get(p.runId);
    if (!run) throw new RemoteError(E.UNKNOWN_RUN, `unknown run: ${p.runId} is not a finished continuable run`);
    kept.delete(p.runId);
    runs.set(p.runId, run);
    try {
      return await run.execute(() => run.resume(p.message));
    } finally {
      runs.delete(p.runId);
      kept.set(p.runId, run);
    }
  },
  shutdown: async () => {
    session.shuttingDown = true;
    const live = [...runs.values()];
    live.forEach((run) => run.cancel("the child is shutting down"));
    await Promise.all(live.map((run) => run.finished));
    return null;
  },
};

const NOTIFICATIONS = {
  exit: () => stop(session.shuttingDown ? 0 : 1),
  "agent/cancel": (p) => {
    const run = runs.get(p.runId);
    if (run) run.cancel(p.reason || "");
  },
};

function stop(code) {
  for (const run of runs.values()) run.cancel("the child is stopping");
  process.exit(code);
}

async function serveRequest(msg) {
  const { id, method } = msg;
  try {
    if (!Object.hasOwn(REQUESTS, method)) {
      respondError(id, E.METHOD_NOT_FOUND, `Method not found: ${method}`);
      return;
    }
    if (!session.initialized && method !== "initialize") {
      respondError(id, E.NOT_INITIALIZED, `not initialized: send initialize before ${method}`);
      return;
    }
    const params = decodeParams(method, msg.params);
    respond(id, await REQUESTS[method](params));
  } catch (err) {
    if (err instanceof InvalidParams) {
      respondError(id, E.INVALID_PARAMS, `Invalid params for ${method}: ${err.message}`);
    } else if (err instanceof RemoteError) {
      respondError(id, err.code, err.message, err.data);
    } else {
      log(`internal error while serving ${method}:`, err);
      respondError(id, E.INTERNAL_ERROR, "internal error in the node child (details are on its stderr)");
    }
  }
}

function serveNotification(msg) {
  const { method } = msg;
  if (!Object.hasOwn(NOTIFICATIONS, method)) return; // unknown notifications are ignored
  if (!session.initialized && method !== "exit") return;
  let params;
  try {
    params = decodeParams(method, msg.params);
  } catch (err) {
    log(`ignoring ${method} with invalid params: ${err.message}`);
    return;
  }
  NOTIFICATIONS[method](params);
}

// --- reading: NDJSON with a cap on every line, the partial one included ------------------------

const utf8 = new TextDecoder("utf-8", { fatal: true });
let parts = [];
let held = 0;
let discarding = false;
let started = false;

function onChunk(chunk) {
  let start = 0;
  while (start < chunk.length) {
    const nl = chunk.indexOf(0x0a, start);
    const end = nl < 0 ? chunk.length : nl;
    if (discarding) {
      if (nl < 0) return;
      discarding = false;
      start = nl + 1;
      continue;
    }
    if (held + (end - start) > readCap) {
      parts = [];
      held = 0;
      respondError(null, E.MESSAGE_TOO_LARGE, `message too large: a line passed the ${readCap}-byte cap`);
      if (nl < 0) {
        discarding = true;
        return;
      }
      start = nl + 1;
      continue;
    }
    if (nl < 0) {
      parts.push(Buffer.from(chunk.subarray(start)));
      held += chunk.length - start;
      return;
    }
    parts.push(chunk.subarray(start, nl));
    const line = parts.length === 1 ? parts[0] : Buffer.concat(parts);
    parts = [];
    held = 0;
    start = nl + 1;
    onLine(line[line.length - 1] === 0x0d ? line.subarray(0, line.length - 1) : line);
  }
}

function onLine(bytes) {
  let text;
  try {
    text = utf8.decode(bytes);
  } catch {
    respondError(null, E.PARSE_ERROR, "Parse error: not valid UTF-8");
    return;
  }
  if (!text.trim()) return;
  if (!started) {
    started = true;
    if (/^\s*content-length:/i.test(text)) {
      respondError(null, E.WRONG_FRAMING, "wrong framing: tether speaks one JSON message per line (NDJSON)");
      process.exit(2);
    }
  }
  let msg;
  try {
    msg = JSON.parse(text);
  } catch {
    respondError(null, E.PARSE_ERROR, "Parse error: not valid JSON");
    return;
  }
  route(msg);
}

const validId = (id) => typeof id === "string" || Number.isInteger(id);

function route(msg) {
  if (!isObject(msg)) {
    respondError(null, E.INVALID_REQUEST, "Invalid request: a message is a JSON object (no batches)");
    return;
  }
  const id = "id" in msg && validId(msg.id) ? msg.id : null;
  const invalid = (why) => respondError(id, E.INVALID_REQUEST, `Invalid request: ${why}`);
  if (msg.jsonrpc !== "2.0") return invalid('"jsonrpc" must be "2.0"');
  if ("method" in msg) {
    if (typeof msg.method !== "string") return invalid('"method" must be a string');
    if ("result" in msg || "error" in msg) return invalid("a message has either a method or a result/error");
    if ("params" in msg && !(isObject(msg.params) || Array.isArray(msg.params))) {
      return invalid("params must be an object or an array");
    }
    if (!("id" in msg)) return serveNotification(msg);
    if (!validId(msg.id)) return invalid("a request id is an integer or a string");
    serveRequest(msg);
    return;
  }
  if ("result" in msg && "error" in msg) return invalid("a response has a result or an error, not both");
  if ("error" in msg) {
    if (!isObject(msg.error) || !Number.isInteger(msg.error.code)) return invalid("malformed error object");
    return deliver(msg);
  }
  if ("result" in msg) {
    if (id === null) return invalid("a response needs its request's id");
    return deliver(msg);
  }
  return invalid("it has no method, result or error");
}

// --- the agent ---------------------------------------------------------------------------------

const TOOLS = {
  list_dir: {
    description: "List a directory of the workspace (default: its root).",
    inputSchema: { type: "object", properties: { path: { type: "string" } } },
    run: (ws, args) => {
      const dir = ws.resolve(args.path === undefined ? "." : args.path);
      return fs
        .readdirSync(dir, { withFileTypes: true })
        .map((d) => (d.isDirectory() ? `${d.name}/` : d.name))
        .sort()
        .join("\n");
    },
  },
  read_file: {
    description: "Read a text file of the workspace.",
    inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
    run: (ws, args) => {
      if (typeof args.path !== "string") throw new ToolError("read_file needs a string path");
      const file = ws.resolve(args.path);
      const data = fs.readFileSync(file);
      const text = data.subarray(0, READ_LIMIT_BYTES).toString("utf8");
      return data.length > READ_LIMIT_BYTES ? `${text}\n[truncated at ${READ_LIMIT_BYTES} bytes]` : text;
    },
  },
  complete: {
    description: "Finish the task: a summary and the paths of what you produced or found.",
    inputSchema: {
      type: "object",
      properties: { summary: { type: "string" }, paths: { type: "array", items: { type: "string" } } },
      required: ["summary"],
    },
    run: null, // handled by the loop: it ends the run
  },
};
const TOOL_NAMES = Object.keys(TOOLS);

class ToolError extends Error {}

class Workspace {
  constructor(root) {
    this.root = fs.realpathSync(root);
    if (!fs.statSync(this.root).isDirectory()) throw new Error("not a directory");
  }

  // The real path of `p` (relative to the root), which must stay under the root.
  resolve(p) {
    const real = fs.realpathSync(path.resolve(this.root, p));
    if (real !== this.root && !real.startsWith(this.root + path.sep)) {
      throw new ToolError(`${p} is outside the workspace`);
    }
    return real;
  }

  artifact(p) {
    const lexical = path.resolve(this.root, p);
    const real = this.resolve(p);
    const lst = fs.lstatSync(lexical);
    const st = fs.statSync(real);
    const fsType = lst.isSymbolicLink() ? "symlink" : st.isDirectory() ? "directory" : "file";
    return {
      path: lexical,
      size: st.size,
      fsType,
      modifiedAt: st.mtime.toISOString(),
    };
  }
}

class Cancelled extends Error {}

class Run {
  constructor(params) {
    this.params = params;
    this.agent = {
      type: "general",
      model: null,
      maxIterations: 20,
      stopConditions: [],
      tools: null,
      instructions: "",
      ...(params.agent || {}),
    };
    this.seq = 0; // one numbering for the run, across its activations
    this.messages = null; // the transcript, kept for agent/message
    this.fresh();
  }

  // Counters, cancellation and completion are per activation (the run, then each message).
  fresh() {
    this.turnCount = 0;
    this.iterationCount = 0;
    this.usage = { inputTokens: 0, outputTokens: 0 };
    this.lastText = "";
    this.cancelReason = null;
    this.onCancel = () => {};
    let done;
    this.finished = new Promise((resolve) => (done = resolve));
    this.done = done;
  }

  cancel(reason) {
    if (this.cancelReason === null) {
      this.cancelReason = reason;
      this.onCancel();
    }
  }

  emit(kind, data) {
    const params = { runId: this.params.runId, seq: this.seq++, kind, data };
    try {
      notify("agent/event", params);
    } catch (err) {
      log(`dropped ${kind} event ${params.seq} of run ${params.runId}: ${err.message}`);
    }
  }

  // Wait for `promise`, unless the run is cancelled first.
  guarded(promise) {
    if (this.cancelReason !== null) return Promise.reject(new Cancelled());
    return new Promise((resolve, reject) => {
      this.onCancel = () => reject(new Cancelled());
      promise.then(resolve, reject);
    }).finally(() => (this.onCancel = () => {}));
  }

  async execute(body) {
    let outcome;
    try {
      outcome = await body();
    } catch (err) {
      if (err instanceof Cancelled) {
        const why = this.cancelReason ? `: ${this.cancelReason}` : "";
        outcome = { kind: "cancelled", message: `the run was cancelled${why}` };
      } else {
        log(`run ${this.params.runId} failed:`, err);
        outcome = { kind: "agent_error", message: "the agent failed with an internal error (details are on stderr)" };
      }
    }
    this.done();
    return this.result(outcome);
  }

  result(outcome) {
    const ok = outcome.kind === "completed";
    return {
      success: ok,
      status: ok ? "completed" : outcome.kind === "cancelled" ? "aborted" : "error",
      summary: outcome.summary !== undefined ? outcome.summary : this.lastText,
      message: outcome.message,
      artifacts: outcome.artifacts || [],
      skipped: outcome.skipped || [],
      turnCount: this.turnCount,
      iterationCount: this.iterationCount,
      usage: this.usage,
      verdict: null,
      failure: ok ? null : { kind: outcome.kind, exitCode: null, signal: null, rung: null, limit: null, stderrTail: "" },
      runId: this.params.runId,
      containment: null,
    };
  }

  tools() {
    const allowed = this.agent.tools;
    return TOOL_NAMES.filter((n) => allowed === null || allowed.includes(n) || n === "complete");
  }

  async loop() {
    const p = this.params;
    if (p.prompt === "CRASH:exit") process.exit(3);
    if (p.prompt === "CRASH:abort") process.abort();
    try {
      this.ws = new Workspace(p.workspace === undefined ? "." : p.workspace);
    } catch (err) {
      return { kind: "agent_error", message: `workspace ${JSON.stringify(p.workspace)} is unusable: ${err.code || err.message}` };
    }
    const names = this.tools();
    const messages = [];
    if (this.agent.instructions) messages.push({ role: "system", content: this.agent.instructions });
    messages.push(...(p.history || []));
    messages.push({ role: "user", content: p.prompt });
    this.messages = messages;
    this.turnCount = 1;
    this.emit("started", { agentType: this.agent.type, description: p.description || "", tools: names, readOnly: !!this.agent.readOnly });
    return this.converse();
  }

  // A follow-up on the kept transcript: the next user message, then the loop again (the
  // definition's budgets apply to this activation anew).
  async resume(message) {
    this.fresh();
    if (this.messages === null) {
      return { kind: "agent_error", message: "the run never started, so it cannot be continued" };
    }
    this.messages.push({ role: "user", content: message });
    this.turnCount = 1;
    return this.converse();
  }

  async converse() {
    const ws = this.ws;
    const messages = this.messages;
    const names = this.tools();
    const specs = names.map((name) => ({ name, description: TOOLS[name].description, inputSchema: TOOLS[name].inputSchema }));
    for (let iteration = 1; iteration <= this.agent.maxIterations; iteration++) {
      this.iterationCount = iteration;
      this.emit("step", { iteration });
      let turn;
      try {
        turn = await this.askModel(messages, specs);
      } catch (err) {
        if (err instanceof RemoteError) return { kind: "agent_error", message: `the model turn failed: ${err.message}` };
        if (err instanceof TooLarge) return { kind: "agent_error", message: `the transcript cannot be sent: ${err.message}` };
        throw err;
      }
      const reply = turn.message || {};
      const content = typeof reply.content === "string" ? reply.content : "";
      const calls = Array.isArray(reply.toolCalls) ? reply.toolCalls : [];
      messages.push({ role: "assistant", content, toolCalls: calls });
      if (content) {
        this.lastText = content;
        this.emit("text", { text: content });
      }
      if (calls.length === 0) {
        if (this.agent.stopConditions.includes("no_tool_calls")) {
          return { kind: "completed", summary: content, message: "the model answered without calling a tool (stop condition)" };
        }
        messages.push({ role: "user", content: "Continue. When the task is done, call `complete` with a summary." });
        continue;
      }
      let completion = null;
      for (const call of calls) {
        this.emit("tool_call", { id: call.id, name: call.name, arguments: call.arguments || {} });
        let out;
        if (completion) out = { content: "not run: the task was already completed", isError: true };
        else if (!names.includes(call.name)) out = { content: `unknown tool ${call.name}; available tools: ${names.join(", ")}`, isError: true };
        else if (call.name === "complete") {
          completion = this.complete(ws, call.arguments || {});
          out = { content: `completed: ${completion.artifacts.length} artifact(s)`, isError: false };
        } else out = this.runTool(ws, call);
        this.emit("tool_result", {
          id: call.id,
          name: call.name,
          isError: out.isError,
          content: out.content.slice(0, PREVIEW_CHARS),
          truncated: out.content.length > PREVIEW_CHARS,
        });
        messages.push({ role: "tool", content: out.isError ? `error: ${out.content}` : out.content, toolCallId: call.id });
      }
      if (completion) return completion;
    }
    return { kind: "budget_exhausted", message: `the run used its ${this.agent.maxIterations} iterations without completing` };
  }

  async askModel(messages, tools) {
    if (session.parentCapabilities.modelBroker === false) {
      throw new RemoteError(E.METHOD_NOT_FOUND, "the parent does not broker model turns");
    }
    const started = Date.now();
    const beat = setInterval(() => {
      this.emit("heartbeat", { waitingFor: "model", elapsedSeconds: Math.round((Date.now() - started) / 100) / 10 });
    }, HEARTBEAT_MS);
    const params = { runId: this.params.runId, messages, model: this.agent.model, tools, purpose: "turn" };
    const asked = request("model/complete", params);
    const id = nextId;
    try {
      const result = await this.guarded(asked);
      const usage = (result && result.usage) || {};
      this.usage.inputTokens += Number.isInteger(usage.inputTokens) ? usage.inputTokens : 0;
      this.usage.outputTokens += Number.isInteger(usage.outputTokens) ? usage.outputTokens : 0;
      return result || {};
    } catch (err) {
      if (err instanceof Cancelled) forget(id); // a late reply is dropped
      throw err;
    } finally {
      clearInterval(beat);
    }
  }

  runTool(ws, call) {
    try {
      return { content: TOOLS[call.name].run(ws, call.arguments || {}), isError: false };
    } catch (err) {
      const why = err instanceof ToolError ? err.message : `${call.name} failed: ${err.code || err.message}`;
      return { content: why, isError: true };
    }
  }

  complete(ws, args) {
    const artifacts = [];
    const skipped = [];
    for (const p of Array.isArray(args.paths) ? args.paths : []) {
      try {
        artifacts.push(ws.artifact(String(p)));
      } catch (err) {
        const reason = err instanceof ToolError ? "outside the workspace" : err.code === "ENOENT" ? "does not exist" : String(err.code || err.message);
        skipped.push({ path: String(p), reason });
      }
    }
    return {
      kind: "completed",
      summary: typeof args.summary === "string" ? args.summary : "",
      message: "the agent called complete",
      artifacts,
      skipped,
    };
  }
}

// --- main --------------------------------------------------------------------------------------

process.stdin.on("data", onChunk);
// stdin EOF is the lifeline: cancel whatever runs and exit at once.
process.stdin.on("end", () => stop(0));
process.stdin.on("error", () => stop(0));
wire.on("error", () => stop(0)); // the parent stopped reading: nothing we write can arrive
