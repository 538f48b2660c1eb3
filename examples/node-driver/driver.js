#!/usr/bin/env node
// A tether parent in JavaScript: drives the Python tether child over wire protocol v1.
//
// Written from docs/protocol.md and protocol/schema.json; no npm dependencies (Node.js >= 18).
//
//   node driver.js --script TURNS.json [--workspace DIR] [--agent TYPE] [--max-iterations N]
//                  [--timeout SECONDS] [--allow-tools] [--python PYTHON] PROMPT
//
// It spawns `PYTHON -I -m tether.child` (PYTHON from --python, else $TETHER_PYTHON, else
// python3), performs the handshake, starts one run, answers the child's `model/complete`
// requests from the scripted turns, streams the run's events to stderr, and prints the
// RunResult as JSON on stdout. Exit status: 0 when the run succeeded, 1 when it did not,
// 2 for bad usage.
"use strict";

const { spawn } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");

const PROTOCOL_VERSION = 1;
const MAX_MESSAGE_BYTES = 33554432; // our reader's cap, announced in initialize
const HANDSHAKE_MS = 10000;
const CANCEL_GRACE_MS = 2000;
const STDERR_TAIL = 4000;
const E = { METHOD_NOT_FOUND: -32601, MODEL_ERROR: -32009 };

// --- command line ------------------------------------------------------------------------------

function usage(message) {
  process.stderr.write(`driver: ${message}\n`);
  process.stderr.write(
    "usage: node driver.js --script TURNS.json [--workspace DIR] [--agent TYPE] " +
      "[--max-iterations N] [--timeout SECONDS] [--allow-tools] [--python PYTHON] PROMPT\n",
  );
  process.exit(2);
}

function parseArgs(argv) {
  const opts = {
    python: process.env.TETHER_PYTHON || "python3",
    workspace: ".",
    agent: "general",
    maxIterations: 20,
    timeout: null,
    allowTools: false,
    script: null,
    prompt: null,
  };
  const valued = { "--python": "python", "--script": "script", "--workspace": "workspace", "--agent": "agent" };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a in valued) {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      opts[valued[a]] = argv[++i];
    } else if (a === "--max-iterations" || a === "--timeout") {
      const n = Number(argv[++i]);
      if (!(n > 0)) usage(`${a} needs a positive number`);
      if (a === "--timeout") opts.timeout = n;
      else opts.maxIterations = Math.floor(n);
    } else if (a === "--allow-tools") {
      opts.allowTools = true;
    } else if (a.startsWith("--")) {
      usage(`unknown option ${a}`);
    } else if (opts.prompt === null) {
      opts.prompt = a;
    } else {
      usage("give one prompt (quote it)");
    }
  }
  if (opts.prompt === null) usage("no prompt");
  if (opts.script === null) usage("--script is required");
  return opts;
}

// The scripted model: a list of turns, or {"turns": [...]}; each turn has `text`, `toolCalls`
// ([{name, arguments, id?}]), optional `usage`, `delay` (seconds) and `error`.
function loadScript(file) {
  let data;
  try {
    data = JSON.parse(fs.readFileSync(file, "utf8"));
  } catch (err) {
    usage(`cannot read the model script ${file}: ${err.message}`);
  }
  const turns = Array.isArray(data) ? data : data && data.turns;
  if (!Array.isArray(turns)) usage(`${file}: expected a list of turns or {"turns": [...]}`);
  return turns;
}

// --- the child ------------------------------------------------------------------------------

class Child {
  constructor(python) {
    this.proc = spawn(python, ["-I", "-m", "tether.child"], { stdio: ["pipe", "pipe", "pipe"] });
    this.spawnError = null;
    this.exited = new Promise((resolve) => {
      this.proc.on("exit", (code, signal) => resolve({ code, signal }));
      this.proc.on("error", (err) => {
        // The child could not be started: there will be no "exit" event.
        this.spawnError = err;
        this.fail(`cannot start ${python}: ${err.message}`);
        resolve({ code: null, signal: null });
      });
    });
    this.proc.stdin.on("error", () => {}); // EPIPE when the child is gone: seen via `exited`
    this.stderrTail = "";
    this.proc.stderr.on("data", (chunk) => {
      this.stderrTail = (this.stderrTail + chunk.toString("utf8")).slice(-STDERR_TAIL);
    });
    this.peerCap = MAX_MESSAGE_BYTES; // until the child announces its own
    this.nextId = 0;
    this.pending = new Map(); // our request id -> {resolve, reject}
    this.onRequest = async () => {
      throw rpcError(E.METHOD_NOT_FOUND, "not served");
    };
    this.onNotification = () => {};
    this.closed = null; // why the child's stdout ended, once it has
    this.readLines();
  }

  readLines() {
    let parts = [];
    let held = 0;
    let discarding = false;
    this.proc.stdout.on("data", (chunk) => {
      let start = 0;
      while (start < chunk.length) {
        const nl = chunk.indexOf(0x0a, start);
        const end = nl < 0 ? chunk.length : nl;
        if (!discarding && held + (end - start) > MAX_MESSAGE_BYTES) {
          this.fail(`the child wrote a line over our ${MAX_MESSAGE_BYTES}-byte cap`);
          parts = [];
          held = 0;
          discarding = true;
        }
        if (nl < 0) {
          if (!discarding) {
            parts.push(Buffer.from(chunk.subarray(start)));
            held += chunk.length - start;
          }
          return;
        }
        if (!discarding) {
          parts.push(chunk.subarray(start, nl));
          const line = Buffer.concat(parts).toString("utf8").replace(/\r$/, "");
          if (line.trim()) this.onLine(line);
        }
        parts = [];
        held = 0;
        discarding = false;
        start = nl + 1;
      }
    });
    this.proc.stdout.on("end", () => this.fail("the child's stdout ended"));
  }

  fail(why) {
    if (this.closed === null) this.closed = why;
    for (const { reject } of this.pending.values()) reject(new Error(why));
    this.pending.clear();
  }

  onLine(line) {
    let msg;
    try {
      msg = JSON.parse(line);
    } catch {
      this.fail(`the child wrote a line that is not JSON: ${line.slice(0, 80)}`);
      return;
    }
    if (typeof msg !== "object" || msg === null || msg.jsonrpc !== "2.0") {
      this.fail(`the child wrote something that is not JSON-RPC 2.0: ${line.slice(0, 80)}`);
    } else if (typeof msg.method === "string" && "id" in msg) {
      this.serve(msg);
    } else if (typeof msg.method === "string") {
      this.onNotification(msg.method, msg.params || {});
    } else if (msg.id === null && msg.error) {
      process.stderr.write(`driver: the child reported: ${msg.error.message} (${msg.error.code})\n`);
    } else {
      const slot = this.pending.get(msg.id);
      if (!slot) return this.fail(`the child answered a request we never sent (id ${JSON.stringify(msg.id)})`);
      this.pending.delete(msg.id);
      if (msg.error) slot.reject(rpcError(msg.error.code, msg.error.message, msg.error.data));
      else slot.resolve(msg.result);
    }
  }

  async serve(msg) {
    let reply;
    try {
      reply = { jsonrpc: "2.0", id: msg.id, result: await this.onRequest(msg.method, msg.params || {}) };
    } catch (err) {
      const code = Number.isInteger(err.code) ? err.code : -32603;
      reply = { jsonrpc: "2.0", id: msg.id, error: { code, message: err.message } };
    }
    this.write(reply);
  }

  write(message) {
    const line = JSON.stringify(message);
    if (Buffer.byteLength(line) > this.peerCap) throw new Error(`message passes the child's ${this.peerCap}-byte cap`);
    if (!this.proc.stdin.destroyed) this.proc.stdin.write(line + "\n");
  }

  request(method, params) {
    if (this.closed !== null) return Promise.reject(new Error(this.closed));
    const id = ++this.nextId;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      const message = params === undefined ? { jsonrpc: "2.0", id, method } : { jsonrpc: "2.0", id, method, params };
      this.write(message);
    });
  }

  notify(method, params) {
    this.write(params === undefined ? { jsonrpc: "2.0", method } : { jsonrpc: "2.0", method, params });
  }

  // The dispose ladder: shutdown, exit + close stdin, SIGTERM, SIGKILL; every rung bounded.
  async dispose() {
    const gone = () => this.spawnError !== null || this.proc.exitCode !== null || this.proc.signalCode !== null;
    if (!gone() && this.closed === null) {
      await within(2000, this.request("shutdown").catch(() => {}));
      if (!gone()) this.notify("exit");
    }
    this.proc.stdin.end();
    if (!gone()) await within(1000, this.exited);
    if (!gone()) {
      this.proc.kill("SIGTERM");
      this.proc.kill("SIGCONT");
      await within(2000, this.exited);
    }
    if (!gone()) {
      this.proc.kill("SIGKILL");
      await this.exited;
    }
    return this.exited;
  }
}

function rpcError(code, message, data) {
  const err = new Error(message);
  err.code = code;
  err.data = data;
  return err;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const within = (ms, promise) => Promise.race([promise, sleep(ms)]);

// --- the run -------------------------------------------------------------------------------------

function scriptedModel(turns) {
  let cursor = 0;
  let ids = 0;
  return async (params) => {
    if (params.purpose === "compaction") {
      return { message: { role: "assistant", content: "(summary of earlier turns)" }, usage: {} };
    }
    if (cursor >= turns.length) {
      throw rpcError(E.MODEL_ERROR, `the scripted model has no turn ${cursor + 1} (the script holds ${turns.length})`);
    }
    const turn = turns[cursor++];
    if (turn.delay > 0) await sleep(turn.delay * 1000);
    if (turn.error) throw rpcError(E.MODEL_ERROR, turn.error);
    const toolCalls = (turn.toolCalls || []).map((c) => ({
      id: c.id || `call_${++ids}`,
      name: c.name,
      arguments: c.arguments || {},
    }));
    const text = turn.text || "";
    const usage = turn.usage || {
      inputTokens: params.messages.reduce((n, m) => n + Math.floor((m.content || "").length / 4) + 1, 0),
      outputTokens: Math.floor(text.length / 4) + 1,
    };
    return {
      message: { role: "assistant", content: text, toolCalls },
      usage,
      stopReason: toolCalls.length ? "tool_use" : "end_turn",
    };
  };
}

function showEvent(ev) {
  const d = ev.data || {};
  let detail = "";
  if (ev.kind === "step") detail = `iteration ${d.iteration}`;
  else if (ev.kind === "text") detail = String(d.text || "").slice(0, 200);
  else if (ev.kind === "tool_call") detail = `${d.name} ${JSON.stringify(d.arguments || {}).slice(0, 120)}`;
  else if (ev.kind === "tool_result") detail = `${d.name}${d.isError ? " (error)" : ""}: ${String(d.content || "").slice(0, 120)}`;
  else if (ev.kind === "heartbeat") detail = `waiting for ${d.waitingFor} (${d.elapsedSeconds}s)`;
  else if (ev.kind === "started") detail = `${d.agentType} with tools ${(d.tools || []).join(", ")}`;
  detail = detail.replace(/\s+/g, " ");
  process.stderr.write(`event ${ev.runId} #${ev.seq} ${ev.kind} ${detail}`.trimEnd() + "\n");
}

// A RunResult the driver builds itself when the child could not answer the run.
function failed(kind, message, exit, stderrTail) {
  return {
    success: false,
    status: kind === "cancelled" ? "aborted" : "error",
    summary: "",
    message,
    artifacts: [],
    skipped: [],
    turnCount: 0,
    iterationCount: 0,
    usage: { inputTokens: 0, outputTokens: 0 },
    verdict: null,
    failure: {
      kind,
      exitCode: exit ? exit.code : null,
      signal: exit ? exit.signal : null,
      rung: null,
      limit: null,
      stderrTail,
    },
    runId: "run-1",
    containment: null,
  };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const turns = loadScript(opts.script);
  const workspace = path.resolve(opts.workspace);
  if (!fs.existsSync(workspace) || !fs.statSync(workspace).isDirectory()) usage(`${opts.workspace} is not a directory`);

  const child = new Child(opts.python);
  const model = scriptedModel(turns);
  child.onRequest = async (method, params) => {
    if (method === "model/complete") return model(params);
    if (method === "tool/approve") {
      return opts.allowTools
        ? { allow: true, reason: "allowed by --allow-tools" }
        : { allow: false, reason: "no approval policy: denied by default (pass --allow-tools)" };
    }
    throw rpcError(E.METHOD_NOT_FOUND, `the driver does not serve ${method}`);
  };
  child.onNotification = (method, params) => {
    if (method === "agent/event") showEvent(params);
  };

  let result;
  try {
    result = await runOnce(child, opts, workspace);
  } finally {
    const exit = await child.dispose();
    if (!result) {
      const why = child.spawnError ? `cannot start ${opts.python}: ${child.spawnError.message}` : child.closed || "the run did not finish";
      const kind = child.spawnError ? "spawn_failed" : exit.signal ? "crashed" : exit.code ? "exit_nonzero" : "protocol";
      result = failed(kind, why, exit, child.stderrTail);
    }
  }
  // Exit now: a scripted turn may still be sleeping for a run that was cancelled.
  process.stdout.write(JSON.stringify(result, null, 2) + "\n", () => process.exit(result.success ? 0 : 1));
}

async function runOnce(child, opts, workspace) {
  let init;
  try {
    init = await Promise.race([
      child.request("initialize", {
        protocolVersion: PROTOCOL_VERSION,
        clientInfo: { name: "tether-node-driver", version: "0.1.0" },
        capabilities: { modelBroker: true, toolApproval: true },
        maxMessageBytes: MAX_MESSAGE_BYTES,
      }),
      sleep(HANDSHAKE_MS).then(() => Promise.reject(new Error(`no answer to initialize within ${HANDSHAKE_MS / 1000}s`))),
    ]);
  } catch (err) {
    child.closed = child.closed || err.message;
    return null;
  }
  if (init.protocolVersion !== PROTOCOL_VERSION) {
    child.closed = `the child answered protocol version ${init.protocolVersion}, not ${PROTOCOL_VERSION}`;
    return null;
  }
  child.peerCap = init.maxMessageBytes || MAX_MESSAGE_BYTES;
  process.stderr.write(`driver: ${init.serverInfo.name} ${init.serverInfo.version} (pid ${init.pid}) is ready\n`);

  const readOnly = ["explorer", "reviewer", "verifier"].includes(opts.agent);
  const running = child.request("agent/run", {
    runId: "run-1",
    prompt: opts.prompt,
    agent: { type: opts.agent, maxIterations: opts.maxIterations, readOnly },
    workspace,
  });
  let timer = null;
  const cancel = (reason) => {
    child.notify("agent/cancel", { runId: "run-1", reason });
    // A child that does not answer `aborted` within the grace is cut off.
    setTimeout(() => {
      child.closed = child.closed || `the child did not answer the cancel within ${CANCEL_GRACE_MS / 1000}s`;
      child.proc.kill("SIGKILL");
    }, CANCEL_GRACE_MS).unref();
  };
  process.once("SIGINT", () => cancel("interrupted"));
  if (opts.timeout !== null) timer = setTimeout(() => cancel(`the driver's ${opts.timeout}s timeout passed`), opts.timeout * 1000);
  try {
    return await running;
  } catch (err) {
    if (err.code !== undefined) {
      // The child refused the run with a JSON-RPC error.
      return failed("agent_error", `the child refused the run: ${err.message} (${err.code})`, null, child.stderrTail);
    }
    return null;
  } finally {
    if (timer) clearTimeout(timer);
  }
}

main().catch((err) => {
  process.stderr.write(`driver: ${err.stack || err}\n`);
  process.exit(2);
});
