// A live terminal on the client WebSocket: one session, joined as observer
// or controller (or a new shell started on an agent), reconnecting forever
// with backoff and resuming from the last byte it showed, so nothing is
// lost or shown twice.
import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { markOnline, wsURL } from "./api";

export type Role = "controller" | "observer" | "";

export interface TermState {
  sessionId: string;
  agentId: string;
  name: string; // the session's name, once the server has said it
  role: Role;
  connected: boolean;
  ended: string;
  error: string;
}

export interface TermOptions {
  el: HTMLElement;
  agentId?: string; // start a new shell on this agent
  sessionId?: string; // or join this session
  role?: Role;
  onState: (s: TermState) => void;
}

const enc = new TextEncoder();

function decode(data: string, encoding?: string): Uint8Array {
  if (encoding !== "base64") return enc.encode(data);
  const bin = atob(data);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

// The smallest size a page fits its terminal to: below it the box is not
// laid out yet (see fitNow).
const minCols = 20;
const minRows = 5;

export class LiveTerminal {
  term: Terminal;
  private fit = new FitAddon();
  private ws?: WebSocket;
  private next = 0; // the session-log offset of the next byte to show
  private wait = 500;
  private closed = false;
  private timer?: number;
  private observer?: ResizeObserver;
  private sized = false; // an observer's size came from the server
  // want is the role to ask for again after a reconnect: the last granted.
  private want: Role;
  state: TermState;

  constructor(private o: TermOptions) {
    this.state = { sessionId: o.sessionId || "", agentId: o.agentId || "", name: "", role: "", connected: false, ended: "", error: "" };
    this.want = o.role || "observer";
    this.term = new Terminal({ cursorBlink: true, fontSize: 14, scrollback: 5000, convertEol: false });
    this.term.loadAddon(this.fit);
    this.term.open(o.el);
    this.fitNow();
    this.observer = new ResizeObserver(() => this.fitNow());
    this.observer.observe(o.el);
    // Every key xterm turns into input goes to the session as is: arrows,
    // Home/End, Ctrl-C, Alt combinations.
    // Only a controller types: an observer's terminal still answers the
    // queries in what it replays (device attributes), which must not go.
    this.term.onData((d) => {
      if (this.state.role === "controller") this.send({ type: "input", session_id: this.state.sessionId, data: d });
    });
    this.term.onResize(({ cols, rows }) => {
      if (this.state.role === "controller") this.send({ type: "resize", session_id: this.state.sessionId, cols, rows });
    });
    this.connect();
  }

  // fitNow fits the terminal to its box, for whoever may size the session:
  // the controller, or a page that has not joined yet. An observer shows
  // the session at the size its programs draw for (sized by the server's
  // frames): fitted to its own window, a full-screen program's old rows
  // would stay where the controller's smaller screen does not reach. That
  // holds while it reconnects too (no role then), or a layout change of the
  // offline banner would refit it to its own box and scroll its rows away.
  private fitNow() {
    if (this.state.role !== "controller" && this.want === "observer" && this.sized) return;
    let d;
    try {
      d = this.fit.proposeDimensions();
    } catch {
      return; // not laid out yet
    }
    // A box caught mid-layout (a window resize, a re-render) proposes a
    // sliver such as 2 columns: sized to it, the shell and tmux rewrap
    // the whole screen, and what was on it may not come back.
    if (!d || !isFinite(d.cols) || !isFinite(d.rows) || d.cols < minCols || d.rows < minRows) return;
    if (d.cols !== this.term.cols || d.rows !== this.term.rows) this.term.resize(d.cols, d.rows);
  }

  private sizeTo(cols?: number, rows?: number) {
    if (!cols || !rows) return;
    this.sized = true;
    if (cols !== this.term.cols || rows !== this.term.rows) this.term.resize(cols, rows);
  }

  private emit() {
    this.o.onState({ ...this.state });
  }

  private send(f: object): boolean {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN || !this.state.sessionId && (f as { type: string }).type !== "start_shell") return false;
    this.ws.send(JSON.stringify(f));
    return true;
  }

  private connect() {
    if (this.closed) return;
    const ws = new WebSocket(wsURL());
    this.ws = ws;
    ws.onopen = () => {
      this.wait = 500;
      this.state.connected = true;
      this.state.error = "";
      markOnline(true);
      this.emit();
      if (this.state.sessionId) {
        // Again after a reconnect: from the next byte not yet shown.
        ws.send(JSON.stringify({ type: "join_session", session_id: this.state.sessionId, role: this.want, replay_from: this.next }));
      } else if (this.o.agentId) {
        ws.send(JSON.stringify({ type: "start_shell", agent_id: this.o.agentId, cols: this.term.cols, rows: this.term.rows }));
      }
    };
    ws.onmessage = (ev) => {
      // The browser bench times the page's share of an echo.
      if ((window as any).__agenticBench) (window as any).__agenticBench.recv(performance.now());
      this.frame(JSON.parse(ev.data));
    };
    ws.onclose = () => {
      this.state.connected = false;
      this.state.role = ""; // granted again on the next join
      this.emit();
      if (this.closed || this.state.ended) return;
      markOnline(false);
      this.timer = window.setTimeout(() => this.connect(), this.wait);
      this.wait = Math.min(this.wait * 2, 10000);
    };
  }

  private frame(f: any) {
    switch (f.type) {
      case "session_started":
        this.state.sessionId = f.session_id;
        this.state.agentId = f.agent_id || this.state.agentId;
        this.state.name = f.name || "";
        this.emit();
        break;
      case "role_changed":
        if (f.session_id === this.state.sessionId) {
          this.state.role = f.role;
          this.want = f.role;
          this.state.error = "";
          this.wait = 500;
          this.emit();
          if (f.role === "controller") {
            this.sized = false;
            this.fitNow();
            this.send({ type: "resize", session_id: this.state.sessionId, cols: this.term.cols, rows: this.term.rows });
          } else this.sizeTo(f.cols, f.rows);
        }
        break;
      case "resized":
        if (f.session_id === this.state.sessionId && this.state.role !== "controller") this.sizeTo(f.cols, f.rows);
        break;
      case "output": {
        if (f.session_id !== this.state.sessionId) break;
        let b = decode(f.data, f.encoding);
        const start = Number(f.offset);
        if (start + b.length <= this.next) break; // already shown
        if (start < this.next) b = b.subarray(this.next - start);
        this.next = Math.max(this.next, start) + b.length;
        this.term.write(b);
        break;
      }
      case "gap":
        this.term.write(`\r\n\x1b[33m[${Number(f.to) - Number(f.from)} bytes not kept]\x1b[0m\r\n`);
        this.next = Math.max(this.next, Number(f.to));
        break;
      case "session_exited":
        if (f.session_id === this.state.sessionId) {
          this.state.ended = f.state + (f.exit_code !== null && f.exit_code !== undefined ? ` (exit ${f.exit_code})` : "");
          this.emit();
        }
        break;
      case "error":
        if (f.code === "session_not_found" && this.state.sessionId && !this.state.ended) {
          // After a server restart the session is known again only once its
          // agent has reconnected: ask again, with backoff, for as long as
          // the page is open.
          this.state.error = "waiting for the session's agent to reconnect…";
          this.emit();
          this.timer = window.setTimeout(() => this.rejoin(), this.wait);
          this.wait = Math.min(this.wait * 2, 10000);
          break;
        }
        this.state.error = f.message || f.code;
        this.emit();
        break;
    }
  }

  private rejoin() {
    if (this.closed || !this.ws || this.ws.readyState !== WebSocket.OPEN) return;
    this.ws.send(JSON.stringify({ type: "join_session", session_id: this.state.sessionId, role: this.want, replay_from: this.next }));
  }

  takeControl() {
    this.send({ type: "join_session", session_id: this.state.sessionId, role: "controller", take: true, replay_from: this.next });
  }

  kill() {
    this.send({ type: "kill_session", session_id: this.state.sessionId });
  }

  focus() {
    this.term.focus();
  }

  dispose() {
    this.closed = true;
    window.clearTimeout(this.timer);
    this.observer?.disconnect();
    this.ws?.close();
    this.term.dispose();
  }
}
