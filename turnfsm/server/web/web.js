// turnfsm web view: the live parts (docs/web.md). The pages read without it.
(function () {
  "use strict";
  var body = document.body;
  var resting = (body.dataset.resting || "").split(" ").filter(Boolean);

  function isResting(state) {
    return resting.indexOf(state) >= 0;
  }

  // body[data-live]: "open" while the page's event stream is connected
  function watch(stream) {
    stream.addEventListener("open", function () {
      body.dataset.live = "open";
    });
    stream.addEventListener("error", function () {
      body.dataset.live = "reconnecting";
    });
    return stream;
  }

  function setState(el, state) {
    if (el) {
      el.textContent = state;
      el.dataset.state = state;
    }
  }

  // ------------------------------------------------------------ the contexts page
  function contextsPage() {
    var out = document.getElementById("running-count");
    var running = {};
    (out.dataset.ids || "").split(" ").filter(Boolean).forEach(function (id) {
      running[id] = true;
    });
    var stream = watch(new EventSource("/events"));
    stream.addEventListener("StateChanged", function (e) {
      var d = JSON.parse(e.data);
      if (isResting(d.new_state)) {
        delete running[d.context_id];
      } else {
        running[d.context_id] = true;
      }
      out.textContent = String(Object.keys(running).length);
      var row = document.querySelector('tr[data-context="' + CSS.escape(d.context_id) + '"] .state');
      setState(row, d.new_state);
    });
  }

  // ------------------------------------------------------------ a context's page
  var applied = 0;
  var asked = 0;

  function refresh() {
    var mine = ++asked;
    return fetch(location.href, { credentials: "same-origin", headers: { "X-Turnfsm-Web": "page" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (text === null || mine < applied) {
          return;
        }
        applied = mine;
        var doc = new DOMParser().parseFromString(text, "text/html");
        document.querySelectorAll(".swap").forEach(function (el) {
          var fresh = doc.getElementById(el.id);
          if (fresh) {
            el.replaceWith(document.importNode(fresh, true));
          }
        });
      });
  }

  // what a state, and the step into it, are in words (data-words, from the server)
  var words = JSON.parse(body.dataset.words || '{"states": {}, "triggers": {}}');

  function inWords(state, trigger) {
    var said = words.states[state] || state;
    var how = words.triggers[trigger];
    var text = how ? how + "; " + said : said;
    return text.charAt(0).toUpperCase() + text.slice(1);
  }

  function contextPage() {
    var cid = body.dataset.context;
    var live = document.getElementById("live");
    var status = document.getElementById("live-status");
    var stop = document.getElementById("stop-form");
    var current = null;
    var stream = watch(new EventSource("/contexts/" + encodeURIComponent(cid) + "/events"));

    stream.addEventListener("ContentDelta", function (e) {
      var d = JSON.parse(e.data);
      var key = d.message_id + ":" + d.attempt + ":" + d.channel;
      if (key !== current) {
        current = key;
        live.textContent = "";
        live.classList.toggle("thinking", d.channel === "thinking");
      }
      live.hidden = false;
      live.textContent += d.delta;
    });
    stream.addEventListener("ToolCallArgumentsDelta", function (e) {
      var d = JSON.parse(e.data);
      var key = d.message_id + ":" + d.attempt + ":call:" + d.call_index;
      if (key !== current) {
        current = key;
        live.textContent = (d.tool_name || "tool") + "(";
        live.classList.remove("thinking");
      }
      live.hidden = false;
      live.textContent += d.delta;
    });
    stream.addEventListener("StateChanged", function (e) {
      var d = JSON.parse(e.data);
      setState(document.getElementById("state"), d.new_state);
      status.textContent = inWords(d.new_state, d.trigger);
      stop.hidden = isResting(d.new_state);
      if (isResting(d.new_state)) {
        refresh().then(function () {
          live.hidden = true;
          live.textContent = "";
          current = null;
        });
      }
    });
    stream.addEventListener("ToolResult", function (e) {
      var d = JSON.parse(e.data);
      status.textContent = d.tool_name + (d.success ? " answered" : " failed");
    });
    stream.addEventListener("Resync", function () {
      refresh();
    });

    // Forms post without a page load; the stream shows what follows.
    document.addEventListener("submit", function (e) {
      var form = e.target;
      if (!form.classList || !form.classList.contains("js-post")) {
        return;
      }
      e.preventDefault();
      var data = new URLSearchParams(new FormData(form, e.submitter));
      var buttons = form.querySelectorAll("button");
      buttons.forEach(function (b) { b.disabled = true; });
      status.textContent = "sending…";
      status.removeAttribute("role");
      fetch(form.action, {
        method: "POST",
        body: data,
        credentials: "same-origin",
        headers: { "X-Turnfsm-Web": "fetch" }
      })
        .then(function (r) {
          return r.json().then(function (j) { return { ok: r.ok, body: j }; });
        })
        .then(function (res) {
          if (res.ok) {
            if (status.textContent === "sending…") {  // the stream said nothing newer
              status.textContent = "sent";
            }
            if (form.id === "send-form") {
              form.reset();
            }
            return refresh();
          }
          status.setAttribute("role", "alert");
          status.textContent = res.body.error.title + ": " + res.body.error.message;
          return null;
        })
        .catch(function (err) {
          status.setAttribute("role", "alert");
          status.textContent = "not sent: " + err;
        })
        .then(function () {
          buttons.forEach(function (b) { b.disabled = false; });
        });
    });
  }

  // The audit page: a run-path diagram wider than its figure scrolls; it opens
  // scrolled to the current state (the figure's data-current).
  function auditPage() {
    var figure = document.getElementById("run-path");
    if (!figure || figure.scrollWidth <= figure.clientWidth) return;
    var node = document.getElementById("s_" + (figure.dataset.current || ""));
    if (!node || !figure.contains(node)) return;
    var box = node.getBoundingClientRect();
    var frame = figure.getBoundingClientRect();
    figure.scrollLeft += box.left + box.width / 2 - (frame.left + frame.width / 2);
  }

  if (body.dataset.page === "contexts") {
    contextsPage();
  } else if (body.dataset.page === "context") {
    contextPage();
  } else if (body.dataset.page === "audit") {
    auditPage();
  }
})();
