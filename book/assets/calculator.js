// The calculator pages: builds the form of the page's calculator and runs the book's own script
// in the page under Pyodide, which this site serves itself (build/hooks/calculators.py copies the
// runtime into assets/pyodide/). The form's description comes from data/calculators/NAME.yml
// through the build (tools/calculators.py). The script checks the inputs itself, so a reader sees
// the command line's own error message; tools/calculator_run.py runs it and flattens its --json.
//
// The block's data-state says where it is: static (the built example), loading, ready, failed.
// data-runs counts the finished runs and data-ready-ms is the time from navigation to the first
// result (tools/calculator_timing.py and tests/build/test_calculators.py read them).

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
function setInputs(form, spec, argv) {
  for (const field of spec.fields) {
    const input = form.querySelector(`[name="${field.option}"]`);
    const at = argv.indexOf(field.option);
    if (field.kind === "flag") input.checked = at >= 0;
    else input.value = at >= 0 && at + 1 < argv.length ? argv[at + 1] : "";
  }
}

// The command line the form says, in the order of its fields; empty fields keep the default.
function argvOf(form, spec) {
  const argv = [];
  for (const field of spec.fields) {
    const input = form.querySelector(`[name="${field.option}"]`);
    if (field.kind === "flag") {
      if (input.checked) argv.push(field.option);
    } else if (input.value.trim() !== "") {
      argv.push(field.option, input.value.trim());
    }
  }
  return argv;
}

// ?params=7e9&sequence-parallel= : one query parameter per option, so a result can be linked.
function queryOf(spec, argv) {
  const query = new URLSearchParams();
  for (const field of spec.fields) {
    const at = argv.indexOf(field.option);
    if (at >= 0) query.set(field.option.slice(2), field.kind === "flag" ? "" : argv[at + 1]);
  }
  return query;
}

function argvFromQuery(spec, query) {
  const argv = [];
  for (const field of spec.fields) {
    const key = field.option.slice(2);
    if (!query.has(key)) continue;
    if (field.kind === "flag") argv.push(field.option);
    else argv.push(field.option, query.get(key));
  }
  return argv;
}

function pre(cls, body) {
  return element("pre", { class: cls }, element("code", {}, body));
}

function renderResult(box, result, text) {
  const parts = [element("p", { class: "calculator-caption" }, text.calculator_command),
    pre("calculator-command", result.command)];
  if (result.status !== 0) {
    parts.push(element("p", { class: "calculator-error", role: "alert" }, result.error));
  } else {
    const rows = result.rows.map(([key, value]) =>
      element("tr", {}, element("td", {}, element("code", {}, key)), element("td", {}, element("code", {}, value))));
    parts.push(pre("calculator-stdout", result.stdout.replace(/\n$/, "")),
      element("table", { class: "calculator-fields" },
        element("thead", {}, element("tr", {}, element("th", {}, text.calculator_field), element("th", {}, text.calculator_value))),
        element("tbody", {}, ...rows)),
      element("details", { class: "calculator-json-block" }, element("summary", {}, text.calculator_json),
        pre("calculator-json", result.json.replace(/\n$/, ""))));
  }
  box.replaceChildren(...parts);
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
  const fromUrl = argvFromQuery(spec, new URLSearchParams(location.search));
  setInputs(form, spec, fromUrl.length ? fromUrl : spec.example);
  block.dataset.state = "loading";
  status.textContent = text.calculator_loading;

  let run;
  try {
    const { loadPyodide } = await import(new URL("assets/pyodide/pyodide.mjs", root).href);
    const [py, runner, script] = await Promise.all([
      loadPyodide({ indexURL: new URL("assets/pyodide/", root).href }),
      fetchText(new URL("assets/calculator_run.py", root)),
      fetchText(new URL(spec.script, root)),
    ]);
    // The repository's layout (the scripts carry the data rows they need: tools/script_shared.py).
    writeFile(py, "/book/tools/calculator_run.py", runner);
    writeFile(py, `/book/${spec.script}`, script);
    py.runPython("import sys; sys.path.insert(0, '/book/tools')");
    const runner_module = py.pyimport("calculator_run");
    run = (argv) => JSON.parse(runner_module.run(`/book/${spec.script}`, py.toPy(argv)));
  } catch (err) {
    block.dataset.state = "failed";
    status.textContent = `${text.calculator_failed} ${err}`;
    return;
  }

  const calculate = () => {
    status.textContent = text.calculator_running;
    const argv = argvOf(form, spec);
    const result = run(argv);
    renderResult(box, result, text);
    const query = queryOf(spec, argv).toString();
    const url = location.pathname + (query ? `?${query}` : "");
    history.replaceState(null, "", url);
    form.querySelector(".calculator-link").href = url;
    status.textContent = text.calculator_ready;
    block.dataset.runs = String(Number(block.dataset.runs || 0) + 1);
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    calculate();
  });
  form.querySelector(".calculator-reset").addEventListener("click", () => {
    setInputs(form, spec, spec.example);
    calculate();
  });
  calculate();
  form.querySelector(".calculator-run").removeAttribute("disabled");
  block.dataset.readyMs = performance.now().toFixed(0);
  block.dataset.state = "ready";
}
