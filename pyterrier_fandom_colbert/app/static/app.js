// The search page: asks /api/search, draws result cards with DOM text nodes (never innerHTML), keeps the query
// in the URL, and fills each card's "why?" panel on demand (R_abs / R_acc shading, single-token view).
"use strict";

(function () {
  const form = document.getElementById("search");
  const input = document.getElementById("q");
  const systemSelect = document.getElementById("system");
  const results = document.getElementById("results");
  const status = document.getElementById("status");
  const errorBox = document.getElementById("error");
  const nothing = document.getElementById("nothing");
  const best = document.getElementById("best");
  const cardTemplate = document.getElementById("card");
  const baseTitle = document.title.replace(/^.* · /, "");
  const COLORS = { r_abs: [31, 119, 180], r_acc: [44, 160, 44], token: [148, 103, 189] };
  let current = 0; // number of the latest search, so a slow older answer never overwrites a newer one

  function safeUrl(url) {
    try {
      const u = new URL(url);
      return u.protocol === "http:" || u.protocol === "https:" ? u.href : "";
    } catch (e) {
      return "";
    }
  }

  function showError(message) {
    errorBox.textContent = message;
    errorBox.hidden = !message;
  }

  // The passage as text nodes, with the likely answer region in <mark class="answer">, the short answer (inside
  // it) in <mark class="short"> and matched words in <span class="m"> (mode "answer"), or every word shaded by a
  // score (mode "shade": values[i] per word, rgb colour).
  function renderPassage(target, text, words, answer, shade, short) {
    target.replaceChildren();
    let pos = 0;
    let answerNode = null;
    let shortNode = null;
    const top = shade ? Math.max(0, ...shade.values.filter(Number.isFinite)) : 0;
    const floor = shade && shade.floor ? Math.min(shade.floor, top) : 0; // shading starts above this value
    const append = (node) => (shortNode || answerNode || target).appendChild(node);
    words.forEach((w, i) => {
      const [start, end, , , , by] = w;
      if (start > pos) append(document.createTextNode(text.slice(pos, start)));
      if (!shade && answer && start === answer[0]) {
        answerNode = document.createElement("mark");
        answerNode.className = "answer";
        target.appendChild(answerNode);
      }
      if (!shade && answerNode && short && start === short[0]) {
        shortNode = document.createElement("mark");
        shortNode.className = "short";
        answerNode.appendChild(shortNode);
      }
      const word = text.slice(start, end);
      let node;
      if (shade) {
        const v = shade.values[i];
        node = document.createElement("span");
        node.textContent = word;
        if (top > floor && v > floor) {
          const [r, g, b] = shade.rgb;
          node.style.backgroundColor = `rgba(${r}, ${g}, ${b}, ${(0.85 * (v - floor) / (top - floor)).toFixed(3)})`;
          node.title = `${shade.label} ${v}`;
        }
      } else if (by) {
        node = document.createElement("span");
        node.className = "m";
        node.title = `matches ${by}`;
        node.textContent = word;
      } else {
        node = document.createTextNode(word);
      }
      append(node);
      if (shortNode && end === short[1]) shortNode = null;
      if (!shade && answerNode && end === answer[1]) answerNode = null;
      pos = end;
    });
    answerNode = null;
    if (pos < text.length) {
      const rest = document.createElement("span");
      rest.className = words.length ? "rest" : "";
      rest.textContent = text.slice(pos);
      target.appendChild(rest);
    }
  }

  function card(result, query) {
    const node = cardTemplate.content.firstElementChild.cloneNode(true);
    const title = node.querySelector(".title");
    title.textContent = result.title;
    const url = safeUrl(result.url);
    if (url) title.href = url;
    else title.removeAttribute("href");
    node.querySelector(".section").textContent = result.section ? ` › ${result.section}` : "";
    node.querySelector(".score").textContent = result.score.toFixed(3);
    const confidence = node.querySelector(".confidence");
    if (typeof result.confidence === "number") {
      confidence.textContent = `${Math.round(100 * result.confidence)}% sure`;
      confidence.title = result.kde_answer === undefined
        ? "calibrated confidence that this passage answers the question"
        : "calibrated probability that the answer in bold is right";
    } else confidence.remove();
    const words = result.words || [];
    // the reader's answer may lie outside the evidence region: then the answer alone is marked
    const short = result.short_answer;
    const region = short && result.answer && !(result.answer[0] <= short[0] && short[1] <= result.answer[1])
      ? short : result.answer;
    renderPassage(node.querySelector(".passage"), result.text, words, region, null, short);
    const why = node.querySelector(".why");
    if (!result.words) {
      why.remove();
      return node;
    }
    const shaded = why.querySelector(".shaded");
    const legend = why.querySelector(".legend");
    const tokens = why.querySelector(".tokens");
    let tokenView = null; // fetched once per card

    function select(button) {
      why.querySelectorAll("button").forEach((b) => b.setAttribute("aria-pressed", String(b === button)));
    }
    function show(view, button) {
      select(button);
      if (view === "r_abs" || view === "r_acc") {
        const column = view === "r_abs" ? 2 : 3;
        renderPassage(shaded, result.text, words, null,
          { values: words.map((w) => w[column]), rgb: COLORS[view], label: button.textContent });
        legend.textContent = view === "r_abs"
          ? "R_abs: how many query vectors have the word among their most similar passage tokens."
          : "R_acc: the sum of the similarities of those matches.";
      }
    }
    why.querySelectorAll("button[data-view]").forEach((b) =>
      b.addEventListener("click", () => show(b.dataset.view, b)));
    (result.query_tokens || []).forEach((tok, i) => {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "tok";
      b.textContent = tok;
      b.addEventListener("click", async () => {
        select(b);
        legend.textContent = "Loading…";
        try {
          if (!tokenView) {
            const params = new URLSearchParams({ q: query, docno: result.docno });
            tokenView = await getJson(`/api/why?${params}`);
          }
          const values = tokenView.token_sim[i];
          const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
          const median = sorted.length ? sorted[Math.floor(sorted.length / 2)] : 0;
          renderPassage(shaded, result.text, tokenView.words.map(([s, e]) => [s, e]), null,
            { values, rgb: COLORS.token, label: `similarity to ${tok}`, floor: median });
          legend.textContent = `Single-token view: each word's similarity to the query token “${tok}” ` +
            "(shaded above the passage's median).";
        } catch (err) {
          legend.textContent = err.message;
        }
      });
      tokens.appendChild(b);
    });
    why.addEventListener("toggle", () => {
      if (why.open && !shaded.childNodes.length) show("r_abs", why.querySelector("button[data-view=r_abs]"));
    });
    return node;
  }

  async function getJson(url) {
    const response = await fetch(url, { headers: { Accept: "application/json" } });
    let body = null;
    try {
      body = await response.json();
    } catch (e) {
      throw new Error(`The server answered ${response.status} without a readable message.`);
    }
    if (!response.ok) throw new Error(body && body.error ? body.error : `The server answered ${response.status}.`);
    return body;
  }

  // The question's best answer, above the results: its text, how sure, and the passage it comes from.
  function showBest(answer) {
    best.hidden = !answer;
    if (!answer) return;
    best.querySelector(".text").textContent = answer.text;
    best.querySelector(".sure").textContent = `${Math.round(100 * answer.confidence)}% sure`;
    best.querySelector(".from").textContent = `result ${answer.rank}, ${answer.title}`;
  }

  async function run(query, system, push) {
    const mine = ++current;
    showError("");
    nothing.hidden = true;
    showBest(null);
    if (push) {
      const params = new URLSearchParams({ q: query, system });
      history.pushState({ q: query, system }, "", `?${params}`);
    }
    document.title = query ? `${query} · ${baseTitle}` : baseTitle;
    if (!query.trim()) {
      results.replaceChildren();
      status.textContent = "";
      showError("Type a question or some words to search for.");
      return;
    }
    status.textContent = "Searching…";
    results.setAttribute("aria-busy", "true");
    try {
      const params = new URLSearchParams({ q: query, system, k: "10" });
      const data = await getJson(`/api/search?${params}`);
      if (mine !== current) return;
      results.replaceChildren(...data.results.map((r) => card(r, data.query)));
      nothing.hidden = !data.nothing_relevant;
      showBest(data.nothing_relevant ? null : data.answer);
      const n = data.results.length;
      status.textContent = n
        ? `${n} result${n === 1 ? "" : "s"} · ${systemSelect.selectedOptions[0].textContent} · ${Math.round(data.took_ms)} ms`
        : "No passage matched.";
    } catch (err) {
      if (mine !== current) return;
      results.replaceChildren();
      status.textContent = "";
      showError(err.message);
    } finally {
      if (mine === current) results.removeAttribute("aria-busy");
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    run(input.value, systemSelect.value, true);
  });
  window.addEventListener("popstate", () => {
    const params = new URLSearchParams(location.search);
    input.value = params.get("q") || "";
    systemSelect.value = params.get("system") || "hybrid";
    if (input.value) run(input.value, systemSelect.value, false);
    else results.replaceChildren();
  });
  if (input.value) run(input.value, systemSelect.value, false);
})();
