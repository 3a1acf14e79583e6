// sombus portal: a form is sent once. A second submit of a form already
// sent (a double click, a second Enter) is dropped, so that a double click
// on "Create" makes one connection and a double click on "Get client
// secret" does not answer the second request over the page that shows the
// secret. Buttons are not disabled: a disabled button's name and value
// would not be sent. A page shown again from the back-forward cache can
// send its forms again. The pages work without this script.
"use strict";
document.addEventListener("submit", function (ev) {
  var form = ev.target;
  if (!(form instanceof HTMLFormElement) || (form.method || "").toLowerCase() !== "post") { return; }
  if (form.dataset.sent) {
    ev.preventDefault();
    return;
  }
  form.dataset.sent = "1";
  form.setAttribute("aria-busy", "true");
});
window.addEventListener("pageshow", function () {
  var forms = document.querySelectorAll("form[data-sent]");
  for (var i = 0; i < forms.length; i++) {
    delete forms[i].dataset.sent;
    forms[i].removeAttribute("aria-busy");
  }
});
