from django import forms
from django.db import transaction
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from . import jobs
from .jobs import send_welcome_email
from .models import Signup


class SignupForm(forms.Form):
    email = forms.EmailField()


def signup(request):
    """Create a signup and enqueue its welcome email in one transaction."""
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            person = Signup.objects.create(email=form.cleaned_data["email"])
            send_welcome_email.enqueue(person.id)  # commits (or rolls back) with the signup
        return redirect("signup")
    signups = Signup.objects.order_by("-created_at")[:20]
    return render(request, "demo/signup.html", {"form": form, "signups": signups})


@require_POST
def record(request, kind: str):
    """Enqueue one recording job of a kind (a plain, an atomic, an async def job, or a
    ``django.tasks`` task) with the posted label, in the request's transaction."""
    label = request.POST["label"]
    with transaction.atomic():
        if kind == "task":
            from testproject.handlers.tasks import record_label  # needs the Tasks framework

            record_label.enqueue(label)
        elif kind in RECORDING_JOBS:
            RECORDING_JOBS[kind].enqueue(label)
        else:
            raise Http404(kind)
    return HttpResponse(status=202)


RECORDING_JOBS = {"plain": jobs.record, "atomic": jobs.record_atomic, "async": jobs.record_async}
