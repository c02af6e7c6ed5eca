"""Single sign-on end to end: Chromium, Airlock and a real OpenID Connect provider process.

Three providers are configured: "good" (the test provider), "rogue" (the same
software, its ID tokens signed by a key its JWKS does not publish) and
"down" (nothing listens). Roles come from the provider's groups.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest

from tests.accounts.idp import IdentityProvider
from tests.serving import free_port, start_server

from .conftest import VIEWPORT, watch_policy

pytestmark = pytest.mark.browser

RISKY = "import subprocess\nsubprocess.run(['rm', '-rf', '/tmp/airlock-sso-test'])\n"


@pytest.fixture(scope="module")
def sso(tmp_path_factory):
    """(Airlock's server, the good provider, the rogue one) with SSO configured."""
    directory = tmp_path_factory.mktemp("sso")
    port = free_port()
    callback = "http://127.0.0.1:{port}/accounts/oidc/{id}/login/callback/"
    good = IdentityProvider(directory, [callback.format(port=port, id="good")])
    rogue = IdentityProvider(directory, [callback.format(port=port, id="rogue")], rogue=True)
    env = {
        "OIDC_PROVIDERS": "good,rogue,down",
        **good.environment("good", "Test IdP"),
        **rogue.environment("rogue", "Rogue IdP"),
        "OIDC_DOWN_ISSUER": f"http://127.0.0.1:{free_port()}",
        "OIDC_DOWN_CLIENT_ID": "airlock",
        "OIDC_DOWN_CLIENT_SECRET": "x",
        "OIDC_DOWN_NAME": "Down IdP",
    }
    server = start_server(directory / "data", extra_env=env, port=port)
    yield server, good, rogue
    server.stop()
    good.stop()
    rogue.stop()


@pytest.fixture
def browser_page(browser, csp_violations):
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(20_000)
    watch_policy(context, csp_violations)
    yield context.new_page()
    context.close()


def sign_in_at(page, username: str, password: str) -> None:
    page.wait_for_selector("#idp-username")
    page.fill("#idp-username", username)
    page.fill("#idp-password", password)
    page.click("#idp-submit")


def test_a_reviewer_signs_in_through_the_provider_and_lands_in_the_queue(sso, browser_page):
    server, good, _ = sso
    olga = good.add("olga", ["airlock-reviewers", "staff"])
    page = browser_page
    page.goto(server.base + "/login/")
    assert page.is_visible("#sso-good") and page.is_visible("#password-sign-in")
    page.click("#sso-good")
    sign_in_at(page, olga.username, olga.password)
    page.wait_for_url(server.base + "/")
    assert page.inner_text("header .who") == "olga" and page.is_visible("#queue-list")
    assert not page.is_visible("nav >> text=Policy")  # a reviewer, not an admin
    [request] = good.authorizations()
    assert request["response_type"] == "code" and request["code_challenge_method"] == "S256"
    assert request["code_challenge"] and request["nonce"] and request["state"]


def test_an_admin_group_makes_an_admin_and_leaving_it_takes_the_role_at_the_next_sign_in(
    sso, browser, csp_violations
):
    server, good, _ = sso
    ines = good.add("ines", ["airlock-admins"])

    def sign_in():
        context = browser.new_context(viewport=VIEWPORT)
        watch_policy(context, csp_violations)
        page = context.new_page()
        page.goto(server.base + "/login/")
        page.click("#sso-good")
        sign_in_at(page, ines.username, ines.password)
        page.wait_for_load_state()
        return context, page

    context, page = sign_in()
    page.wait_for_url(server.base + "/overview/")
    assert page.is_visible("nav >> text=Policy")
    context.close()
    ines.groups = ["airlock-reviewers"]
    good.save()
    context, page = sign_in()
    page.wait_for_url(server.base + "/")
    assert not page.is_visible("nav >> text=Policy") and page.is_visible("#queue-list")
    context.close()
    ines.groups = ["marketing"]
    good.save()
    context, page = sign_in()
    page.wait_for_selector("#no-role")
    assert "none of the groups" in page.inner_text("#no-role")
    assert page.goto(server.base + "/queue/").url.startswith(server.base + "/login/")
    context.close()


def test_a_reviewer_with_no_factor_of_their_own_steps_up_at_the_provider(sso, browser_page):
    server, good, _ = sso
    pavel = good.add("pavel", ["airlock-reviewers"])
    proposal = server.propose_script(RISKY, reason="sso step-up")
    assert proposal["risk"]["score"] >= 7
    page = browser_page
    page.goto(server.base + "/login/")
    page.click("#sso-good")
    sign_in_at(page, pavel.username, pavel.password)
    page.wait_for_url(server.base + "/")
    page.goto(server.base + f"/proposals/{proposal['id']}/")
    page.click("#approve-button")
    page.wait_for_url("**/step-up/**")
    assert page.inner_text("#step-up-sso") == "Sign in again at Test IdP"
    page.click("#step-up-sso")
    sign_in_at(page, pavel.username, pavel.password)  # asked again, whatever session it had
    page.wait_for_url(f"**/proposals/{proposal['id']}/approve/")
    page.click("#approve-button")
    page.wait_for_selector("text=You have decided")
    step_up = good.authorizations()[-1]
    assert step_up["prompt"] == "login" and step_up["max_age"] == "0"
    _, after = server.api("GET", f"/api/v1/proposals/{proposal['id']}")
    assert after["approvals"] == 1 and after["decisions"][0]["reviewer"] == "pavel"


def test_a_callback_with_a_state_this_browser_did_not_start_is_refused(sso, browser_page):
    server, good, _ = sso
    vera = good.add("vera", ["airlock-reviewers"])
    page = browser_page
    held: list[str] = []

    def hold(route):
        # The provider's answer to the sign-in form is a chain of redirects that ends at
        # Airlock's callback. Follow it here, with the browser's cookies, and keep the
        # callback from Airlock: its code is never redeemed.
        response = route.fetch(max_redirects=0)
        location = urljoin(route.request.url, response.headers["location"])
        while "/login/callback/" not in location:
            response = page.context.request.get(location, max_redirects=0)
            location = urljoin(location, response.headers["location"])
        held.append(location)
        route.fulfill(status=200, content_type="text/plain", body="held")

    page.goto(server.base + "/login/")
    page.click("#sso-good")
    page.route(re.compile(r".*/interaction/[^/]+/login$"), hold)
    sign_in_at(page, vera.username, vera.password)
    page.wait_for_selector("text=held")
    page.unroute_all()
    callback = urlsplit(held[0])
    code = parse_qs(callback.query)["code"][0]
    page.goto(f"{server.base}{callback.path}?code={code}&state=not-ours")
    assert "could not be completed" in page.inner_text("#sso-error-reason")
    assert page.goto(server.base + "/queue/").url.startswith(server.base + "/login/")
    page.goto(held[0])  # the code itself was good: with the state this browser holds, it signs in
    page.wait_for_url(server.base + "/")
    assert page.inner_text("header .who") == "vera"


def test_a_code_used_once_cannot_sign_in_again(sso, browser, browser_page, csp_violations):
    server, good, _ = sso
    wanda = good.add("wanda", ["airlock-reviewers"])
    page = browser_page
    page.goto(server.base + "/login/")
    with page.expect_request(lambda r: "/accounts/oidc/good/login/callback/" in r.url) as seen:
        page.click("#sso-good")
        sign_in_at(page, wanda.username, wanda.password)
    page.wait_for_url(server.base + "/")
    other = browser.new_context(viewport=VIEWPORT)
    watch_policy(other, csp_violations)
    thief = other.new_page()
    thief.goto(seen.value.url)  # the same code and state, from another browser
    assert "could not be completed" in thief.inner_text("#sso-error-reason")
    assert thief.goto(server.base + "/queue/").url.startswith(server.base + "/login/")
    page.goto(seen.value.url)  # and replayed in the browser that used it
    assert page.is_visible("#sso-error-reason")
    other.close()


def test_an_id_token_signed_by_another_key_is_refused(sso, browser_page):
    server, _, rogue = sso
    mallory = rogue.add("mallory", ["airlock-admins"])
    page = browser_page
    page.goto(server.base + "/login/")
    page.click("#sso-rogue")
    sign_in_at(page, mallory.username, mallory.password)
    page.wait_for_selector("#sso-error-reason")
    assert "Invalid id_token" in page.inner_text("#sso-error-reason")
    assert page.goto(server.base + "/overview/").url.startswith(server.base + "/login/")


def test_a_provider_that_is_down_is_said_and_password_sign_in_still_works(sso, browser_page):
    server, _, _ = sso
    page = browser_page
    page.goto(server.base + "/login/")
    page.click("#sso-down")
    page.wait_for_selector("#sso-error-reason")
    assert "could not be reached" in page.inner_text("#sso-error-reason")
    page.click("#sso-error-back")
    page.fill("#id_login", "reviewer")
    page.fill("#id_password", "airlock-demo")
    page.click("#password-submit")
    page.wait_for_url(server.base + "/")
