// Sends the login form at once: opening the link logs in; the button stays for browsers without scripts.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("login");
  if (form) form.submit();
});
