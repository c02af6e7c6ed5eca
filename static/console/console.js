/* Airlock console: keyboard, countdowns, and the live execution terminal.
 * No framework: htmx does the swapping, this file does what htmx can't. */
(function () {
  "use strict";

  // ---- countdowns --------------------------------------------------------
  function formatLeft(ms) {
    if (ms <= 0) return "expired";
    var s = Math.floor(ms / 1000);
    var d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600);
    var m = Math.floor((s % 3600) / 60), sec = s % 60;
    if (d) return "in " + d + "d " + h + "h";
    if (h) return "in " + h + "h " + m + "m";
    if (m) return "in " + m + "m " + (sec < 10 ? "0" : "") + sec + "s";
    return "in " + sec + "s";
  }
  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-countdown]").forEach(function (el) {
      var left = Date.parse(el.getAttribute("datetime")) - now;
      el.textContent = formatLeft(left);
      el.classList.toggle("soon", left > 0 && left < 5 * 60 * 1000);
      el.classList.toggle("expired", left <= 0);
    });
  }
  setInterval(tick, 1000);

  // ---- the session ended while a live view was open -----------------------
  // The server closes the socket with 4401 (signed out, idle, too old, token
  // revoked): reload, and the sign-in page says why.
  var SIGNED_OUT = 4401;
  document.addEventListener("htmx:wsClose", function (event) {
    var close = event.detail && event.detail.event;
    if (close && close.code === SIGNED_OUT) location.reload();
  });

  // ---- queue selection (survives live re-renders) ------------------------
  var selectedId = null;
  function rows() { return Array.prototype.slice.call(document.querySelectorAll("#queue-list tr[data-proposal]")); }
  function selectRow(row, focus) {
    rows().forEach(function (r) { r.classList.remove("selected"); r.removeAttribute("aria-selected"); });
    if (!row) { selectedId = null; return; }
    row.classList.add("selected");
    row.setAttribute("aria-selected", "true");
    selectedId = row.getAttribute("data-proposal");
    if (focus) { row.focus(); row.scrollIntoView({ block: "nearest" }); }
  }
  function currentRow() {
    return selectedId && document.getElementById("proposal-row-" + selectedId);
  }
  function move(step) {
    var list = rows();
    if (!list.length) return;
    var index = list.indexOf(currentRow());
    index = index < 0 ? (step > 0 ? 0 : list.length - 1) : Math.min(Math.max(index + step, 0), list.length - 1);
    selectRow(list[index], true);
  }
  document.addEventListener("htmx:oobAfterSwap", restoreSelection);
  document.addEventListener("htmx:afterSettle", restoreSelection);
  // A live message settles after its swaps: htmx then puts back the class the new rows came
  // with, which drops the cursor's (and the picks') until this marks them again.
  document.addEventListener("htmx:wsAfterMessage", restoreSelection);
  function restoreSelection() {
    var row = currentRow();
    var hadFocus = document.activeElement === document.body || (document.activeElement && document.activeElement.closest && document.activeElement.closest("#queue-list"));
    if (row) selectRow(row, hadFocus && document.activeElement !== row);
    tick();
  }
  document.addEventListener("click", function (event) {
    var row = event.target.closest && event.target.closest("#queue-list tr[data-proposal]");
    if (row && !event.target.closest("a, .pick")) { window.location = row.getAttribute("data-href"); }
  });

  // ---- rows picked for one decision (x or a click; kept across live re-renders) ----
  var picked = [];
  function pickBoxes() { return Array.prototype.slice.call(document.querySelectorAll("#queue-list .pick input[type=checkbox]")); }
  function showPicked() {
    var present = pickBoxes().map(function (box) { return box.value; });
    picked = picked.filter(function (id) { return present.indexOf(id) >= 0; });
    pickBoxes().forEach(function (box) {
      box.checked = picked.indexOf(box.value) >= 0;
      box.closest("tr").classList.toggle("picked", box.checked);
    });
    var count = document.getElementById("batch-count");
    var chosen = picked.join(",").split(",").filter(Boolean).length;
    if (count) count.textContent = chosen ? chosen + " selected: a approves, r rejects them" : "Select rows (x) to decide them together";
    ["batch-approve", "batch-reject"].forEach(function (id) {
      var button = document.getElementById(id);
      if (button) button.disabled = !picked.length;
    });
  }
  function togglePick(id) {
    var at = picked.indexOf(id);
    if (at >= 0) picked.splice(at, 1); else picked.push(id);
    showPicked();
  }
  document.addEventListener("change", function (event) {
    var box = event.target.closest && event.target.closest("#queue-list .pick input[type=checkbox]");
    if (!box) return;
    if (box.checked !== (picked.indexOf(box.value) >= 0)) togglePick(box.value);
  });
  document.addEventListener("htmx:oobAfterSwap", showPicked);
  document.addEventListener("htmx:wsAfterMessage", showPicked);  // after the settle: see above
  document.addEventListener("DOMContentLoaded", showPicked);

  // ---- forms that ask first (data-confirm; no inline handlers: see the CSP) ----
  document.addEventListener("submit", function (event) {
    var form = event.target.closest && event.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.getAttribute("data-confirm"))) event.preventDefault();
  });

  // ---- confirm dialog ----------------------------------------------------
  function confirmDecision(kind, url, what, comment, ids) {
    var dialog = document.getElementById("confirm-decision");
    if (!dialog || !url) return;
    var form = document.getElementById("confirm-form");
    form.setAttribute("action", url);
    form.querySelectorAll("input[name=ids]").forEach(function (input) { input.remove(); });
    (ids || []).forEach(function (id) {
      var input = document.createElement("input");
      input.type = "hidden"; input.name = "ids"; input.value = id;
      form.appendChild(input);
    });
    document.getElementById("confirm-title").textContent = kind === "reject" ? "Reject?" : "Approve?";
    document.getElementById("confirm-what").textContent = what || "";
    var submit = document.getElementById("confirm-submit");
    submit.textContent = kind === "reject" ? "Reject" : "Approve";
    submit.className = kind === "reject" ? "danger" : "primary";
    var text = document.getElementById("confirm-comment");
    text.value = comment || "";
    var next = form.querySelector("input[name=next]");
    if (!next) { next = document.createElement("input"); next.type = "hidden"; next.name = "next"; form.appendChild(next); }
    next.value = window.location.pathname + window.location.search;
    dialog.showModal();
    (kind === "reject" ? text : submit).focus();
  }
  document.addEventListener("click", function (event) {
    if (event.target.id === "confirm-cancel") document.getElementById("confirm-decision").close();
    if (event.target.closest && event.target.closest("[data-help]")) document.getElementById("help").showModal();
    if (event.target.closest && event.target.closest("[data-dismiss]")) event.target.closest(".notice").remove();
  });
  // Notices fade out by themselves; the proposal stays one click away in the queue.
  // A burst leaves its newest few (they come newest first): the queue lists them all.
  var MAX_NOTICES = 5;
  document.addEventListener("htmx:oobAfterSwap", function (event) {
    document.querySelectorAll("#notices .notice:not([data-timer])").forEach(function (notice) {
      notice.setAttribute("data-timer", "1");
      setTimeout(function () { notice.remove(); }, 20000);
    });
    var shown = document.querySelectorAll("#notices .notice");
    for (var i = MAX_NOTICES; i < shown.length; i++) shown[i].remove();
  });

  // ---- keyboard ----------------------------------------------------------
  var pendingG = false;
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var t = event.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
    if (document.querySelector("dialog[open]")) return;  // Esc closes; the dialog owns the keys
    var page = document.body.getAttribute("data-page");
    var key = event.key;
    if (pendingG) { pendingG = false; if (key === "q") { window.location = "/queue/"; } return; }
    if (key === "?") { document.getElementById("help").showModal(); event.preventDefault(); return; }
    if (key === "g") { pendingG = true; return; }
    if (page === "queue") {
      var row = currentRow();
      if (key === "j") { move(1); event.preventDefault(); }
      else if (key === "k") { move(-1); event.preventDefault(); }
      else if (key === "Enter" && row) { window.location = row.getAttribute("data-href"); }
      else if (key === "x" && row) {
        // As its checkbox does: a row of identical proposals picks them all.
        togglePick(row.getAttribute("data-ids") || row.getAttribute("data-proposal"));
        event.preventDefault();
      }
      else if ((key === "a" || key === "r") && (picked.length || (row && row.hasAttribute("data-ids")))) {
        // The rows picked, else the row under the cursor when it stands for identical ones.
        var many = key === "a" ? "approve" : "reject";
        var bar = document.getElementById("batch-form");
        var ids = (picked.length ? picked : [row.getAttribute("data-ids")]).join(",").split(",");
        var listed = ids.map(function (id) { return "#" + id; }).join(", ");
        confirmDecision(many, bar.getAttribute("data-" + many + "-url"), ids.length + " proposals: " + listed, "", ids);
        event.preventDefault();
      }
      else if ((key === "a" || key === "r") && row) {
        var kind = key === "a" ? "approve" : "reject";
        confirmDecision(kind, row.getAttribute("data-" + kind + "-url"), row.getAttribute("data-summary"));
        event.preventDefault();
      }
    } else if (page === "proposal") {
      var approve = document.getElementById("approve-button");
      var reject = document.getElementById("reject-button");
      var comment = document.getElementById("decision-comment");
      if (key === "a" && approve) { approve.click(); event.preventDefault(); }
      else if (key === "r" && reject) {
        confirmDecision("reject", reject.getAttribute("formaction"), document.title, comment ? comment.value : "");
        event.preventDefault();
      }
    }
  });

  // ---- ANSI → DOM --------------------------------------------------------
  var PALETTE = ["#1e1e1e", "#e06c75", "#98c379", "#e5c07b", "#61afef", "#c678dd", "#56b6c2", "#dcdfe4",
                 "#5c6370", "#ff7b86", "#b5e890", "#ffd88a", "#8cc8ff", "#e09cff", "#7fdde9", "#ffffff"];
  function color256(n) {
    if (n < 16) return PALETTE[n];
    if (n >= 232) { var g = 8 + (n - 232) * 10; return "rgb(" + g + "," + g + "," + g + ")"; }
    n -= 16;
    var steps = [0, 95, 135, 175, 215, 255];
    return "rgb(" + steps[Math.floor(n / 36)] + "," + steps[Math.floor(n / 6) % 6] + "," + steps[n % 6] + ")";
  }
  function AnsiState() { this.reset(); this.carry = ""; }
  AnsiState.prototype.reset = function () { this.fg = null; this.bg = null; this.bold = false; this.dim = false; this.italic = false; this.underline = false; };
  AnsiState.prototype.apply = function (codes) {
    var list = codes === "" ? [0] : codes.split(";").map(function (c) { return parseInt(c || "0", 10); });
    for (var i = 0; i < list.length; i++) {
      var c = list[i];
      if (c === 0) this.reset();
      else if (c === 1) this.bold = true;
      else if (c === 2) this.dim = true;
      else if (c === 3) this.italic = true;
      else if (c === 4) this.underline = true;
      else if (c === 22) { this.bold = false; this.dim = false; }
      else if (c === 23) this.italic = false;
      else if (c === 24) this.underline = false;
      else if (c >= 30 && c <= 37) this.fg = PALETTE[c - 30];
      else if (c >= 90 && c <= 97) this.fg = PALETTE[c - 90 + 8];
      else if (c === 39) this.fg = null;
      else if (c >= 40 && c <= 47) this.bg = PALETTE[c - 40];
      else if (c >= 100 && c <= 107) this.bg = PALETTE[c - 100 + 8];
      else if (c === 49) this.bg = null;
      else if ((c === 38 || c === 48) && list[i + 1] === 5) { this[c === 38 ? "fg" : "bg"] = color256(list[i + 2] || 0); i += 2; }
      else if ((c === 38 || c === 48) && list[i + 1] === 2) { this[c === 38 ? "fg" : "bg"] = "rgb(" + (list[i + 2] || 0) + "," + (list[i + 3] || 0) + "," + (list[i + 4] || 0) + ")"; i += 4; }
    }
  };
  AnsiState.prototype.span = function (text, stream) {
    var span = document.createElement("span");
    if (stream === "stderr") span.className = "stderr";
    if (this.fg) span.style.color = this.fg;
    if (this.bg) span.style.backgroundColor = this.bg;
    if (this.bold) span.style.fontWeight = "bold";
    if (this.dim) span.style.opacity = "0.7";
    if (this.italic) span.style.fontStyle = "italic";
    if (this.underline) span.style.textDecoration = "underline";
    span.textContent = text;
    return span;
  };
  // Text with escape sequences → spans; a sequence cut at a chunk's end waits for the next chunk.
  AnsiState.prototype.render = function (data, stream) {
    var text = (this.carry + data).replace(/\r\n/g, "\n");
    this.carry = "";
    var cut = text.match(/\x1b(\[[0-9;?]*)?$/);
    if (cut) { this.carry = cut[0]; text = text.slice(0, cut.index); }
    var fragment = document.createDocumentFragment();
    var re = /\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07]*\x07|\r/g, last = 0, m;
    while ((m = re.exec(text)) !== null) {
      if (m.index > last) fragment.appendChild(this.span(text.slice(last, m.index), stream));
      if (m[2] === "m") this.apply(m[1]);
      last = re.lastIndex;
    }
    if (last < text.length) fragment.appendChild(this.span(text.slice(last), stream));
    return fragment;
  };

  // ---- live terminal -----------------------------------------------------
  function Terminal(el) {
    this.el = el;
    this.lastSeq = 0;
    this.states = { stdout: new AnsiState(), stderr: new AnsiState() };
    this.finished = false;
    this.retries = 0;
    this.jump = document.getElementById("jump-bottom");
    this.stateEl = document.getElementById("stream-state");
    this.follow = true;
    var self = this;
    el.addEventListener("scroll", function () {
      self.follow = self.atBottom();
      self.jump.hidden = self.follow;
    });
    this.jump.addEventListener("click", function () { self.follow = true; self.jump.hidden = true; self.scrollEnd(); });
    this.connect();
  }
  Terminal.prototype.atBottom = function () {
    return this.el.scrollHeight - this.el.scrollTop - this.el.clientHeight < 8;
  };
  Terminal.prototype.scrollEnd = function () { this.el.scrollTop = this.el.scrollHeight; };
  Terminal.prototype.setState = function (text, state) {
    this.stateEl.textContent = text;
    this.el.setAttribute("data-state", state);
  };
  Terminal.prototype.connect = function () {
    var self = this;
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var url = scheme + location.host + this.el.getAttribute("data-ws") + "?after=" + this.lastSeq;
    var socket = new WebSocket(url);
    this.socket = socket;
    socket.onopen = function () { self.retries = 0; self.setState("live", "live"); };
    socket.onmessage = function (event) {
      var message = JSON.parse(event.data);
      if (message.type === "chunk") self.append(message);
      else if (message.type === "status") self.status(message);
    };
    socket.onclose = function (event) {
      if (self.finished) return;
      if (event.code === SIGNED_OUT) { location.reload(); return; }
      if (event.code === 4403 || event.code === 4404) {
        self.setState("not allowed to watch (" + event.code + ")", "closed");
        return;
      }
      // Resume after the last seq seen: the server replays the rest from the database.
      var delay = Math.min(1000 * Math.pow(2, self.retries++), 10000);
      self.setState("connection lost; reconnecting…", "reconnecting");
      setTimeout(function () { self.connect(); }, delay);
    };
  };
  Terminal.prototype.append = function (chunk) {
    if (chunk.seq <= this.lastSeq) return;  // already shown
    var follow = this.follow;
    this.el.appendChild(this.states[chunk.stream] ? this.states[chunk.stream].render(chunk.data, chunk.stream) : document.createTextNode(chunk.data));
    this.lastSeq = chunk.seq;
    this.el.setAttribute("data-last-seq", String(chunk.seq));
    if (follow) this.scrollEnd();
    else this.jump.hidden = false;
  };
  Terminal.prototype.status = function (message) {
    if (message.terminal) {
      this.finished = true;
      this.setState("finished: " + message.status.replace("_", " "), "done");
    }
    var panel = document.getElementById("execution-status");
    if (panel && window.htmx) {
      htmx.ajax("GET", this.el.getAttribute("data-status-url"), { target: "#execution-status", swap: "outerHTML" });
    }
  };

  document.addEventListener("DOMContentLoaded", function () {
    tick();
    var terminal = document.getElementById("terminal");
    if (terminal) window.airlockTerminal = new Terminal(terminal);
    var list = rows();
    if (document.body.getAttribute("data-page") === "queue" && list.length) selectRow(list[0], false);
  });

  // ---- attention: what waits in the tab's title, browser notifications ----
  // The title counts what waits: on the queue, the count of the tab it shows ("Needs me (3)
  // · Airlock", as the server renders it); elsewhere the nav badge's, in front ("(3) History
  // · Airlock"). The same out-of-band swaps that update those counts keep the title live.
  // New proposals that wait for review reach every open reviewer page as live notices
  // (approvals.review.consumers; base.html's #live-shell where a page has no socket of its
  // own); while the tab is in the background they also become browser notifications, for a
  // reviewer who turned them on on their profile page. The choice is kept in this browser
  // (localStorage), beside the permission it needs.
  var NOTIFY_KEY = "airlock.notifications";
  var NOTIFY_PAUSE = 500;  // the notices of one burst become one notification
  var titleBase = null;
  function titleCounter() {
    var tab = document.querySelector(".tabs .tab[aria-current=page] .count");
    return tab ? { el: tab, inPlace: true } : { el: document.getElementById("pending-count"), inPlace: false };
  }
  function showTitleCount() {
    var counter = titleCounter();
    if (!counter.el) return;
    if (titleBase === null) titleBase = document.title.replace(/^\(\d+\) /, "").replace(/ \(\d+\)( · [^·]*)$/, "$1");
    var n = parseInt(counter.el.textContent, 10) || 0;
    var cut = titleBase.lastIndexOf(" · ");
    var title = titleBase;
    if (n && counter.inPlace && cut >= 0) title = titleBase.slice(0, cut) + " (" + n + ")" + titleBase.slice(cut);
    else if (n) title = "(" + n + ") " + titleBase;
    if (document.title !== title) document.title = title;
  }
  document.addEventListener("DOMContentLoaded", showTitleCount);
  document.addEventListener("htmx:oobAfterSwap", showTitleCount);

  function storedChoice(value) {
    try {
      if (value !== undefined) localStorage.setItem(NOTIFY_KEY, value);
      return localStorage.getItem(NOTIFY_KEY);
    } catch (e) { return null; }  // storage refused: notifications stay off
  }
  function notifying() {
    return "Notification" in window && Notification.permission === "granted" && storedChoice() === "on";
  }
  var arrived = [], tellTimer = null;
  function isNews(notice) {
    // Told before this page was rendered (both times the server's): not news, but a notice
    // a live connection delivered late; the page showed what it was about when it opened.
    var since = Date.parse(document.getElementById("notices").getAttribute("data-since"));
    return !(Date.parse(notice.getAttribute("data-at")) < since);
  }
  document.addEventListener("htmx:oobAfterSwap", function () {
    document.querySelectorAll("#notices .notice-review_requested:not([data-told])").forEach(function (notice) {
      notice.setAttribute("data-told", "1");
      if (isNews(notice)) arrived.push(notice);
    });
    if (arrived.length && !tellTimer) tellTimer = setTimeout(tell, NOTIFY_PAUSE);
  });
  function tell() {
    tellTimer = null;
    var news = arrived.splice(0);
    if (!news.length || !document.hidden || !notifying()) return;
    var links = news.map(function (notice) { return notice.querySelector("a"); });
    var first = news[0], title, body, tag;
    if (news.length === 1) {
      title = links[0].textContent + " waits for review";
      body = [first.getAttribute("data-summary"), first.getAttribute("data-reason"), "risk " + first.getAttribute("data-risk")]
        .filter(Boolean).join("\n");
      tag = "airlock-proposal-" + links[0].getAttribute("href").replace(/\D/g, "");
    } else {
      title = news.length + " new proposals wait for review";
      body = links.map(function (link) { return link.textContent; }).join("\n");
      tag = "airlock-proposals";
    }
    var note;
    try {
      // The same tag from another open tab replaces it: one notification per proposal.
      note = new Notification(title, { body: body, tag: tag });
    } catch (e) { return; }  // where only a service worker may notify (Chrome on Android)
    var href = news.length === 1 ? links[0].getAttribute("href") : "/queue/";
    note.onclick = function () { window.focus(); window.location.href = href; note.close(); };
  }

  // The opt-in on the profile page: asks for the permission, keeps the choice.
  function showOptIn() {
    var button = document.getElementById("browser-notifications-toggle");
    var state = document.getElementById("browser-notifications-state");
    if (!button || !state) return;
    button.hidden = true;
    if (!("Notification" in window)) { state.textContent = "This browser cannot show notifications."; return; }
    if (Notification.permission === "denied") {
      state.textContent = "Blocked: this browser refuses Airlock's notifications (see its site settings).";
      return;
    }
    var on = notifying();
    state.textContent = on ? "On in this browser." : "Off in this browser.";
    button.textContent = on ? "Turn off" : "Turn on";
    button.hidden = false;
  }
  document.addEventListener("DOMContentLoaded", showOptIn);
  document.addEventListener("click", function (event) {
    if (!event.target.closest || !event.target.closest("#browser-notifications-toggle")) return;
    if (notifying()) { storedChoice("off"); showOptIn(); return; }
    Notification.requestPermission().then(function (permission) {
      storedChoice(permission === "granted" ? "on" : "off");
      showOptIn();
    });
  });
})();
