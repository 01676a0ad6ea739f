from django import forms
from django.db import transaction
from django.shortcuts import redirect, render

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
