// The calculator pages: builds the form of the page's calculator and runs the book's own script
// in the page under Pyodide, which this site serves itself (build/hooks/calculators.py copies the
// runtime into assets/pyodide/). The form's description comes from data/calculators/NAME.yml
// through the build (tools/calculators.py). The script checks the inputs itself, so a reader sees
// the command line's own error message; tools/calculator_run.py runs it and flattens its --json.
//
// The answer above the report is the calculator's sentence (data/calculators/NAME.yml answer)
// filled from the result by tools/calculator_run.py.
//
// The block's data-state says where it is: static (the built example), loading, ready, failed.
// data-runs counts the finished runs and data-ready-ms is the time from navigation to the first
// result (tools/calculator_timing.py and tests/build/test_calculators.py read them).

const LOAD_TIMEOUT_S = 90;  // Pyodide loads in a few seconds; a blocked or broken wasm never does
const block = document.querySelector(".calculator");
if (block) start(block);

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value !== null && value !== undefined) node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}

function buildForm(spec, text) {
  const form = element("form", { class: "calculator-form" });
  spec.pickers.forEach((picker, index) => {
    const select = element("select", { "data-picker": index },
      element("option", { value: "" }, text.calculator_choose),
      ...picker.rows.map((row, i) => element("option", { value: i }, row.name)));
    select.addEventListener("change", () => {
      if (select.value === "") return;
      for (const [option, value] of Object.entries(picker.rows[select.value].values)) {
        form.querySelector(`[name="${option}"]`).value = value;
      }
    });
    form.append(element("label", { class: "calculator-picker" }, element("span", {}, picker.label), select));
  });
  for (const field of spec.fields) {
    let input;
    if (field.kind === "flag") {
      input = element("input", { type: "checkbox", name: field.option });
    } else if (field.kind === "multi") {  // one or more of the choices: a box each
      form.append(element("fieldset", { class: "calculator-field calculator-multi", title: field.help },
        element("legend", {}, field.label),
        ...field.choices.map((choice) => element("label", {},
          element("input", { type: "checkbox", name: field.option, value: choice }), choice)),
        element("code", {}, field.option)));
      continue;
    } else if (field.kind === "choice") {
      const none = field.default === null ? "—" : `${text.calculator_default}: ${field.default}`;
      input = element("select", { name: field.option }, element("option", { value: "" }, none),
        ...field.choices.map((choice) => element("option", { value: choice }, choice)));
    } else {
      input = element("input", { type: "text", name: field.option, autocomplete: "off", spellcheck: "false",
        placeholder: field.default === null ? null : `${text.calculator_default}: ${field.default}` });
    }
    const label = element("label", { class: `calculator-field calculator-${field.kind}`, title: field.help },
      element("span", {}, field.label), input, element("code", {}, field.option));
    form.append(label);
  }
  const link = element("a", { class: "calculator-link", href: "" }, text.calculator_link);
  const reset = element("button", { type: "button", class: "md-button calculator-reset" }, text.calculator_reset);
  const run = element("button", { type: "submit", class: "md-button md-button--primary calculator-run", disabled: "" },
    text.calculator_run);
  form.append(element("p", { class: "calculator-buttons" }, run, " ", reset, " ", link));
  return form;
}

// The form's fields set to the command line `argv` (unset where argv does not give the option).
// A choice that the list lacks (from a link) is added to it, so that the script runs with it and
// says itself what it makes of it; returns those values, "--option value".
function setInputs(form, spec, argv) {
  const foreign = [];
  for (const field of spec.fields) {
    const input = form.querySelector(`[name="${field.option}"]`);
    const at = argv.indexOf(field.option);
    const value = at >= 0 && at + 1 < argv.length ? argv[at + 1] : "";
    if (field.kind === "multi") {
      const values = valuesAt(argv, at);
      for (const value of values.filter((v) => !field.choices.includes(v))) {
        input.parentElement.parentElement.insertBefore(element("label", { "data-foreign": "" },
          element("input", { type: "checkbox", name: field.option, value }), value), input.parentElement);
        foreign.push(`${field.option} ${value}`);
      }
      for (const box of form.querySelectorAll(`[name="${field.option}"]`)) box.checked = values.includes(box.value);
    } else if (field.kind === "flag") {
      input.checked = at >= 0;
    } else if (field.kind === "choice" && value !== "" && !field.choices.includes(value)) {
      input.append(element("option", { value, "data-foreign": "" }, value));
      input.value = value;
      foreign.push(`${field.option} ${value}`);
    } else {
      input.value = value;
    }
  }
  return foreign;
}

// The values of the option at argv[at] (none where at < 0): those up to the next option.
function valuesAt(argv, at) {
  if (at < 0) return [];
  const end = argv.findIndex((arg, i) => i > at && arg.startsWith("--"));
  return argv.slice(at + 1, end < 0 ? argv.length : end);
}

// The command line the form says, in the order of its fields; empty fields keep the default.
function argvOf(form, spec) {
  const argv = [];
  for (const field of spec.fields) {
    const input = form.querySelector(`[name="${field.option}"]`);
    if (field.kind === "multi") {
      const ticked = [...form.querySelectorAll(`[name="${field.option}"]:checked`)].map((box) => box.value);
      if (ticked.length) argv.push(field.option, ...ticked);
    } else if (field.kind === "flag") {
      if (input.checked) argv.push(field.option);
    } else if (input.value.trim() !== "") {
      argv.push(field.option, input.value.trim());
    }
  }
  return argv;
}

// ?params=7e9&sequence-parallel=&zeropp=qwz+hpz : one query parameter per option, so a result can be linked.
function queryOf(spec, argv) {
  const query = new URLSearchParams();
  for (const field of spec.fields) {
    const at = argv.indexOf(field.option);
    if (at < 0) continue;
    const value = field.kind === "flag" ? "" : field.kind === "multi" ? valuesAt(argv, at).join(" ") : argv[at + 1];
    query.set(field.option.slice(2), value);
  }
  return query;
}

// The argv of a link's query, and the query's keys that are no option of the form.
function argvFromQuery(spec, query) {
  const argv = [];
  for (const field of spec.fields) {
    const key = field.option.slice(2);
    if (!query.has(key)) continue;
    if (field.kind === "flag") argv.push(field.option);
    else if (field.kind === "multi") argv.push(field.option, ...query.get(key).split(/\s+/).filter(Boolean));
    else argv.push(field.option, query.get(key));
  }
  const known = new Set(spec.fields.map((field) => field.option.slice(2)));
  const unknown = [...query.keys()].filter((key) => !known.has(key)).map((key) => `?${key}`);
  return [argv, unknown];
}

// A result block: it scrolls sideways, so a keyboard can reach it.
function pre(cls, body) {
  return element("pre", { class: cls }, element("code", { tabindex: "0" }, body));
}

function renderResult(box, result, spec, notice, word) {
  const text = spec.strings;
  const parts = [];
  if (notice.length) {
    parts.push(element("p", { class: "calculator-notice", role: "alert" },
      `${text.calculator_bad_link} ${word(notice.join(", "))}`));
  }
  if (result.status === 0 && result.answer) parts.push(element("p", { class: "calculator-answer" }, result.answer));
  parts.push(element("p", { class: "calculator-caption" }, text.calculator_command),
    pre("calculator-command", result.command));
  if (result.status !== 0) {
    parts.push(element("p", { class: "calculator-error", role: "alert" }, word(result.error)));
  } else {
    const rows = result.rows.map(([key, value]) =>
      element("tr", {}, element("td", {}, element("code", {}, key)), element("td", {}, element("code", {}, value))));
    parts.push(pre("calculator-stdout", result.stdout.replace(/\n$/, "")),
      element("details", { class: "calculator-fields-block" }, element("summary", {}, text.calculator_fields),
        element("table", { class: "calculator-fields" },
          element("thead", {}, element("tr", {}, element("th", {}, text.calculator_field), element("th", {}, text.calculator_value))),
          element("tbody", {}, ...rows))),
      element("details", { class: "calculator-json-block" }, element("summary", {}, text.calculator_json),
        pre("calculator-json", result.json.replace(/\n$/, ""))));
  }
  box.replaceChildren(...parts);
}

function timeout(seconds, message) {
  return new Promise((_, reject) => setTimeout(() => reject(new Error(message)), seconds * 1000));
}

async function fetchText(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.text();
}

function writeFile(py, path, content) {
  py.FS.mkdirTree(path.slice(0, path.lastIndexOf("/")));
  py.FS.writeFile(path, content);
}

async function start(block) {
  const spec = JSON.parse(block.dataset.spec);
  const text = spec.strings;
  const root = new URL(block.dataset.root, location.href);
  const status = block.querySelector(".calculator-status");
  const box = block.querySelector(".calculator-result");
  const form = buildForm(spec, text);
  block.insertBefore(form, status);
  const [fromUrl, unknownKeys] = argvFromQuery(spec, new URLSearchParams(location.search));
  let notice = [...unknownKeys, ...setInputs(form, spec, fromUrl.length ? fromUrl : spec.example)];
  block.dataset.state = "loading";
  status.textContent = text.calculator_loading;

  const late = text.calculator_timeout.replace("{seconds}", LOAD_TIMEOUT_S);
  let run, word;
  try {
    const loading = (async () => {
      const { loadPyodide } = await import(new URL("assets/pyodide/pyodide.mjs", root).href);
      return Promise.all([
        loadPyodide({ indexURL: new URL("assets/pyodide/", root).href }),
        fetchText(new URL("assets/calculator_run.py", root)),
        fetchText(new URL(spec.script, root)),
      ]);
    })();
    const [py, runner, script] = await Promise.race([loading, timeout(LOAD_TIMEOUT_S, late)]);
    // The repository's layout (the scripts carry the data rows they need: tools/script_shared.py).
    writeFile(py, "/book/tools/calculator_run.py", runner);
    writeFile(py, `/book/${spec.script}`, script);
    py.runPython("import sys; sys.path.insert(0, '/book/tools')");
    const runner_module = py.pyimport("calculator_run");
    run = (argv) => JSON.parse(runner_module.run(`/book/${spec.script}`, py.toPy(argv), spec.answer));
    // a message worded for the form: labels for options, the form's words for command-line ones
    const labels = py.toPy(spec.fields.map((field) => [field.option, field.label]));
    const rewrites = py.toPy(spec.form_messages);
    word = (message) => runner_module.form_message(message, labels, rewrites);
  } catch (err) {
    block.dataset.state = "failed";
    status.textContent = err.message === late ? late : `${text.calculator_failed} ${err}`;
    status.classList.add("calculator-status-failed");
    return;
  }

  const calculate = () => {
    status.textContent = text.calculator_running;
    const argv = argvOf(form, spec);
    const result = run(argv);
    renderResult(box, result, spec, notice, word);
    notice = [];  // a link's problems are told once, with the run they concern
    const query = queryOf(spec, argv).toString();
    const url = location.pathname + (query ? `?${query}` : "");
    history.replaceState(null, "", url);
    form.querySelector(".calculator-link").href = url;
    status.textContent = result.status === 0 ? text.calculator_ready : text.calculator_refused;
    status.classList.toggle("calculator-status-failed", result.status !== 0);
    block.dataset.runs = String(Number(block.dataset.runs || 0) + 1);
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    calculate();
  });
  form.querySelector(".calculator-reset").addEventListener("click", () => {
    notice = setInputs(form, spec, spec.example);
    calculate();
  });
  calculate();
  form.querySelector(".calculator-run").removeAttribute("disabled");
  block.dataset.readyMs = performance.now().toFixed(0);
  block.dataset.state = "ready";
}
