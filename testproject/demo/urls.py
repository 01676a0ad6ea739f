from django.urls import path

from . import views

urlpatterns = [
    path("", views.signup, name="signup"),
    path("record/<str:kind>/", views.record, name="record"),
]
