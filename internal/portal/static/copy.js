// sombus portal: the copy buttons. Each <button data-copy="ID"> copies the
// text of the element with that id. The pages work without this script:
// the text stays there to select and copy by hand.
"use strict";
document.addEventListener("click", function (ev) {
  var btn = ev.target.closest("button[data-copy]");
  if (!btn) { return; }
  var src = document.getElementById(btn.getAttribute("data-copy"));
  if (!src || !navigator.clipboard) { return; }
  var label = btn.textContent;
  navigator.clipboard.writeText(src.textContent).then(function () {
    btn.textContent = "Copied";
    setTimeout(function () { btn.textContent = label; }, 2000);
  }, function () {
    btn.textContent = "Select and copy by hand";
  });
});
// The "select all" box of the dead-letter list.
document.addEventListener("change", function (ev) {
  var all = ev.target.closest("input[data-select-all]");
  if (!all) { return; }
  var boxes = document.querySelectorAll("input[name=message_ids]");
  for (var i = 0; i < boxes.length; i++) { boxes[i].checked = all.checked; }
});
